//! The dependency rules of ARCHITECTURE.md, checked against `cargo metadata`.
//!
//! Core crates stay free of I/O and UI stacks so they build for wasm32 and run in the browser;
//! the protocol crate stays free of the core so server and viewer can evolve it alone; peers we
//! benchmark against never enter the product. A violation prints the dependency path.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::process::Command;

use serde_json::Value;

struct Graph {
    /// package name -> names of its normal (non-dev, non-build) dependencies.
    deps: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    fn load() -> Graph {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // The platforms kvscope builds for. Unfiltered, an offline `cargo metadata` needs the
        // manifests of every platform's dependencies (Windows-only crates included), which an
        // offline cache need not hold; wasm32 stays in so its dependencies are checked too.
        let host = host_triple();
        let out = Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--offline"])
            .args(["--filter-platform", &host, "--filter-platform", "wasm32-unknown-unknown"])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .output()
            .expect("run cargo metadata");
        assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
        let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
        let names: BTreeMap<&str, &str> =
            meta["packages"].as_array().unwrap().iter().map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap())).collect();
        let mut deps = BTreeMap::new();
        for node in meta["resolve"]["nodes"].as_array().unwrap() {
            let name = names[node["id"].as_str().unwrap()].to_owned();
            let normal: BTreeSet<String> = node["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
                .map(|d| names[d["pkg"].as_str().unwrap()].to_owned())
                .collect();
            deps.entry(name).or_insert_with(BTreeSet::new).extend(normal);
        }
        Graph { deps }
    }

    /// The path from `from` to `to` through normal dependencies, if any.
    fn path(&self, from: &str, to: &str) -> Option<Vec<String>> {
        let mut queue = VecDeque::from([vec![from.to_owned()]]);
        let mut seen = BTreeSet::new();
        while let Some(path) = queue.pop_front() {
            let last = path.last().unwrap();
            if last == to {
                return Some(path);
            }
            for next in self.deps.get(last).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    queue.push_back(longer);
                }
            }
        }
        None
    }
}

/// The host's target triple, from `rustc -vV`.
fn host_triple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("-vV").output().expect("run rustc -vV");
    let text = String::from_utf8(out.stdout).expect("rustc -vV prints UTF-8");
    text.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc -vV names the host").to_owned()
}

fn forbid(graph: &Graph, from: &str, to: &[&str], why: &str, violations: &mut Vec<String>) {
    assert!(graph.deps.contains_key(from), "{from} is not in the workspace graph");
    for target in to {
        if let Some(path) = graph.path(from, target) {
            violations.push(format!("{from} must not depend on {target} ({why}): {}", path.join(" -> ")));
        }
    }
}

#[test]
fn crate_layers_point_one_way() {
    let graph = Graph::load();
    let mut violations = Vec::new();
    let io_and_ui = ["tokio", "zeromq", "zmq", "leptos", "web-sys", "axum", "dynamo-kv-router"];
    for core in ["kvscope-wire", "kvscope-normalize", "kvscope-tiers", "kvscope-router", "kvscope-index", "kvscope-protocol"] {
        forbid(&graph, core, &io_and_ui, "core crates do no I/O and build for wasm32", &mut violations);
    }
    forbid(
        &graph,
        "kvscope-protocol",
        &["kvscope-wire", "kvscope-normalize", "kvscope-tiers", "kvscope-router", "kvscope-index"],
        "the protocol carries payloads as opaque bytes",
        &mut violations,
    );
    forbid(&graph, "kvscope-wire", &["kvscope-normalize", "kvscope-tiers"], "wire <- normalize <- tiers", &mut violations);
    forbid(&graph, "kvscope-normalize", &["kvscope-tiers"], "wire <- normalize <- tiers", &mut violations);
    forbid(&graph, "kvscope-wire", &["kvscope-router"], "wire <- normalize <- router", &mut violations);
    forbid(&graph, "kvscope-normalize", &["kvscope-router"], "wire <- normalize <- router", &mut violations);
    // The router's index stands on what the relay (or an indexer's listener) publishes.
    forbid(&graph, "kvscope-router", &["kvscope-index"], "router <- index", &mut violations);
    forbid(&graph, "kvscope-normalize", &["kvscope-index"], "normalize <- router <- index", &mut violations);
    // The dashboard's two threads: the engine worker decides, the page renders. What they share
    // (kvscope-engine-protocol) pulls in no UI, no I/O and, of the core, only the typed labels;
    // the page links no decoder, tree, router or engine, so it cannot start deciding.
    forbid(
        &graph,
        "kvscope-engine-protocol",
        &["leptos", "web-sys", "tokio", "kvscope-tiers", "kvscope-router", "kvscope-index", "kvscope-engine", "kvscope-protocol"],
        "the engine protocol carries summaries, and holds neither UI nor I/O nor engine",
        &mut violations,
    );
    forbid(
        &graph,
        "kvscope-web",
        &["kvscope-engine", "kvscope-tiers", "kvscope-router", "kvscope-index", "kvscope-protocol"],
        "the page renders what the engine worker summarises",
        &mut violations,
    );
    forbid(&graph, "kvscope-engine", &["leptos"], "the engine draws no DOM", &mut violations);
    for product in ["kvscope", "kvscope-web", "kvscope-engine", "kvscope-wasm"] {
        forbid(&graph, product, &["dynamo-kv-router", "kvscope-peer-bench"], "peers stay in benches/", &mut violations);
    }
    // Test support: the encoder of engine bytes and the corpus (with the vector table) are
    // dev-dependencies of the core, never normal ones, so what the product decodes cannot depend
    // on how the tests encode. The server's demo publishes simulated engines and may encode.
    for core in ["kvscope-wire", "kvscope-normalize", "kvscope-tiers", "kvscope-router", "kvscope-index", "kvscope-protocol"] {
        forbid(&graph, core, &["kvscope-encode", "kvscope-corpus"], "test support stays out of the core", &mut violations);
    }
    for product in ["kvscope-web", "kvscope-engine", "kvscope-engine-protocol", "kvscope-wasm"] {
        forbid(&graph, product, &["kvscope-encode", "kvscope-corpus"], "test support stays out of what ships to browsers", &mut violations);
    }
    forbid(&graph, "kvscope", &["kvscope-corpus"], "the corpus is test support", &mut violations);
    assert!(violations.is_empty(), "layer rules broken:\n{}", violations.join("\n"));
}

/// The page's crate graph reaches `kvscope-normalize` (and `kvscope-wire` under it) for the label
/// enums the engine protocol carries, so the graph alone cannot say the page decides nothing.
/// Its sources can: they name no core crate and call none of the label methods that consult the
/// rule table. Every flag the page shows (routine, severity, clean) comes from the engine.
#[test]
fn the_page_calls_no_rule() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../web/src"));
    let forbidden = ["kvscope_normalize", "kvscope_wire", "is_routine_filter", "label_text", "RULES", ".rule()", ".summary("];
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    let mut files = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files += 1;
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    for word in forbidden.iter().filter(|w| line.contains(**w)) {
                        found.push(format!("{}:{}: {word}", path.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(files > 10, "read the page's sources in {}", root.display());
    assert!(found.is_empty(), "the page consults the core; let the engine send the flag instead:\n{}", found.join("\n"));
}
