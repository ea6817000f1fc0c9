//! `kvscope`: see ../README.md, or run `kvscope --help`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    kvscope::cli::main()
}
