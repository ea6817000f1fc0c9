//! `kvscope`: see ../README.md, or run `kvscope --help`.

fn main() -> std::process::ExitCode {
    kvscope::cli::main()
}
