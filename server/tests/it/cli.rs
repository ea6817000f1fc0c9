//! The front door: `--help`, usage errors and their exit status.

use std::process::Command;

use crate::support::BIN;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run kvscope");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn help_lists_every_subcommand() {
    let (code, stdout, _) = run(&["--help"]);
    assert_eq!(code, Some(0));
    for sub in ["serve", "demo", "record", "replay", "publish", "check"] {
        assert!(stdout.lines().any(|l| l.trim_start().starts_with(sub)), "--help does not list {sub}:\n{stdout}");
    }
    assert!(stdout.contains("3 `check` found a fatal verdict"), "{stdout}");
}

#[test]
fn a_bad_workers_spec_is_a_usage_error_that_says_what_to_write() {
    let (code, _, stderr) = run(&["serve", "--workers", "0=h:5557"]);
    assert_eq!(code, Some(2));
    assert_eq!(stderr.trim(), "error: --workers entry 1 (\"0=h:5557\"): \"h:5557\": expected tcp://host:port");
}

#[test]
fn an_unknown_policy_is_a_usage_error_listing_the_presets() {
    let (code, _, stderr) = run(&["check", "x.kvcap", "--block-size", "16", "--policy", "Fixed"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("unknown policy \"Fixed\"; pass one of: fixed, legacy"), "{stderr}");
}

#[test]
fn check_without_block_size_is_a_usage_error() {
    let (code, _, stderr) = run(&["check", "x.kvcap"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--block-size"), "{stderr}");
}

#[test]
fn an_unknown_scenario_is_a_usage_error() {
    let (code, _, stderr) = run(&["demo", "--scenario", "nope", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2));
    assert_eq!(stderr.trim(), "error: unknown scenario \"nope\"; pass one of: kimi-k3, sglang-tiers, lmcache-relay, fleet");
}
