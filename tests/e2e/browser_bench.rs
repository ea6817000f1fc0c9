//! Browser benchmark: the frame rate the dashboard ingests while its longest main-thread task
//! stays under 50 ms, with 16 and 64 workers, and the page's memory after a sustained run.
//!
//! ```text
//! cargo bench -p kvscope-e2e --bench browser
//! ```
//!
//! For each worker count it starts `kvscope demo --workers W --rate R` (R batches per second per
//! worker) at rising rates, opens the page in headless Chromium, lets it warm up, then measures
//! for `KVSCOPE_BENCH_STEP_SECONDS` (default 15): frames the cards gained per second, and the
//! longest main-thread task (PerformanceObserver 'longtask', installed before the app loads).
//! The highest rate whose longest task stays under 50 ms and whose ingest keeps up with the
//! demo (no lag notice, at least 90% of the offered frames) is the figure. Then it runs that
//! rate for `KVSCOPE_BENCH_SOAK_SECONDS` (default 60; 600 for the ten-minute figure) and reads
//! the page's memory: the JS heap (`performance.memory`), the wasm linear memory, and what the
//! model retains. Every result is printed as one JSON object per line, prefixed `BENCH `.
//!
//! Env: KVSCOPE_BENCH_QUERY (page settings, e.g. `mem=64`), KVSCOPE_BENCH_WORKERS (default "16,64"), KVSCOPE_BENCH_RATES (batches/s per worker,
//! default "5,10,20,40,80,160"), KVSCOPE_BENCH_SCENARIO (default kimi-k3), KVSCOPE_BENCH_DP_RANKS
//! (engines per worker, default 1), KVSCOPE_BENCH_NO_PLANE=1 (no simulated Dynamo relays),
//! KVSCOPE_BENCH_SOAK_ALWAYS=1 (the sustained run at the first rate even if it failed the bound),
//! KVSCOPE_BENCH_PROFILE_STARTUP=1 (a CPU profile of start-up, `tests/artifacts/bench-startup.cpuprofile`),
//! KVSCOPE_TRACE=1 (start-up's trace events, `tests/artifacts/bench-startup-trace.json`: what each
//! main-thread task did, for chrome://tracing or Perfetto UI; chromedriver hands its trace over
//! once, so the measured stretch has none: its long animation frames say where their time went),
//! KVSCOPE_BENCH_CAPTURE=FILE (instead of a live fleet: FILE opened through the page's file input,
//! from a static server, timed until every frame is on the cards, against `kvscope check` on the
//! same file in the same run; KVSCOPE_BENCH_BLOCK_SIZE, default 16, for both),
//! KVSCOPE_BENCH_PROFILE_SECONDS=N (a CPU profile of the sustained run's last N seconds, written to
//! `tests/artifacts/bench-soak.cpuprofile`, its top functions by self time printed), KVSCOPE_BIN.
//! Each step also reports the longest task of start-up (load to the end of warm-up), the frames
//! per second the server itself received (`kvscope_frames_total`: what the demo engines managed
//! to publish on the shared cores, the second baseline), the cores the server and its demo
//! engines used, and the main thread's shares of wall time (DevTools' `Performance.getMetrics`).

use std::time::{Duration, Instant};

use kvscope_e2e::*;
use serde_json::{Value, json};

fn env_list(name: &str, default: &str) -> Vec<f64> {
    std::env::var(name).unwrap_or_else(|_| default.to_owned()).split(',').filter_map(|s| s.trim().parse().ok()).collect()
}

fn env_secs(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Frames the page ingested, fleet-wide (the overview's total).
async fn frames_shown(b: &Browser) -> u64 {
    b.js("const e = document.querySelector('[data-testid=\"fleet-frames\"]'); return e ? Number(e.textContent) : 0;")
        .await
        .as_u64()
        .unwrap_or(0)
}

async fn page_memory(b: &Browser) -> Value {
    // The page's wasm is the main thread's; the engine's (the model, retention) is the worker's,
    // which its summaries report on the memory line.
    b.js("const m = performance.memory || {};\
          const w = window.__kvWasm && window.__kvWasm.memory ? window.__kvWasm.memory.buffer.byteLength : null;\
          const r = document.querySelector('[data-testid=\"memory\"]');\
          const e = r ? Number(r.dataset.engineWasmBytes) : null;\
          return { js_heap_used_bytes: m.usedJSHeapSize || null, js_heap_total_bytes: m.totalJSHeapSize || null,\
                   wasm_memory_bytes: e, page_wasm_memory_bytes: w, retained: r ? r.textContent : null };")
        .await
}

#[derive(Default)]
struct Step {
    /// The longest main-thread task from page load to the end of the warm-up (start-up).
    startup_longest_task_ms: f64,
    offered_fps: f64,
    ingested_fps: f64,
    longest_task_ms: f64,
    long_tasks: u64,
    lagged: bool,
    /// The data-quality strip's words at the end (gaps, lost frames, decode errors, or complete).
    data_quality: String,
    /// Start-up's long tasks, `[start ms, duration ms]` from navigation.
    startup_tasks: Value,
    /// Where the page's main thread spent the measured stretch, as shares of wall time
    /// (DevTools' `Performance.getMetrics`: tasks, script, layout, style recalculation).
    main_thread: Value,
    /// CPU the server and its demo engines used over the stretch, in cores.
    server_cores: Option<f64>,
    /// Frames per second the server itself received (`kvscope_frames_total`): what the demo
    /// engines managed to publish on the shared cores, the page's second baseline.
    server_fps: Option<f64>,
}

/// DevTools' cumulative main-thread durations (seconds): tasks, script, layout, style.
async fn main_thread_seconds(b: &Browser) -> [f64; 4] {
    let metrics = b.cdp("Performance.getMetrics", json!({})).await;
    let get = |name: &str| {
        metrics["metrics"].as_array().and_then(|m| m.iter().find(|x| x["name"] == name)).and_then(|x| x["value"].as_f64()).unwrap_or(0.0)
    };
    [get("TaskDuration"), get("ScriptDuration"), get("LayoutDuration"), get("RecalcStyleDuration")]
}

/// The page's main-thread tasks of 50 ms or more in a trace, as `[wall ms, on-CPU ms]`: a task
/// that ran a third of its wall time waited for a core (the shared machine's other threads),
/// and a shorter task is what makes it short again. Only the renderers that loaded something
/// from `origin` (the page's server) count: Chromium's own WebUI (the omnibox popup) runs in
/// renderers too, and its start-up tasks are not the page's.
fn long_tasks_on_cpu(events: &Value, origin: &str) -> Vec<(f64, f64)> {
    let events = events.as_array().map(Vec::as_slice).unwrap_or_default();
    let loads_from_origin = |e: &&Value| {
        [&e["args"]["data"]["url"], &e["args"]["beginData"]["url"]].iter().any(|u| u.as_str().is_some_and(|u| u.starts_with(origin)))
    };
    let page: std::collections::HashSet<u64> = events.iter().filter(loads_from_origin).filter_map(|e| e["pid"].as_u64()).collect();
    let main: std::collections::HashSet<(u64, u64)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "CrRendererMain")
        .filter_map(|e| Some((e["pid"].as_u64()?, e["tid"].as_u64()?)))
        .filter(|(pid, _)| page.contains(pid))
        .collect();
    events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "ThreadControllerImpl::RunTask")
        .filter(|e| e["pid"].as_u64().zip(e["tid"].as_u64()).is_some_and(|k| main.contains(&k)))
        .filter_map(|e| Some((e["dur"].as_f64()? / 1000.0, e["tdur"].as_f64().unwrap_or(0.0) / 1000.0)))
        .filter(|&(wall, _)| wall >= 50.0)
        .map(|(wall, cpu)| ((wall * 10.0).round() / 10.0, (cpu * 10.0).round() / 10.0))
        .collect()
}

/// The functions with the most self time in a DevTools CPU profile, as `[name, url:line, ms]`.
fn top_self_time(profile: &Value, n: usize) -> Vec<Value> {
    let nodes = profile["nodes"].as_array().cloned().unwrap_or_default();
    let (samples, deltas) = (profile["samples"].as_array(), profile["timeDeltas"].as_array());
    let mut us_by_node = std::collections::HashMap::<u64, f64>::new();
    if let (Some(samples), Some(deltas)) = (samples, deltas) {
        for (s, d) in samples.iter().zip(deltas) {
            *us_by_node.entry(s.as_u64().unwrap_or(0)).or_default() += d.as_f64().unwrap_or(0.0);
        }
    }
    let mut by_fn = std::collections::HashMap::<String, f64>::new();
    for node in &nodes {
        let us = us_by_node.get(&node["id"].as_u64().unwrap_or(0)).copied().unwrap_or(0.0);
        let f = &node["callFrame"];
        let key = format!("{} {}:{}", f["functionName"].as_str().unwrap_or("?"), f["url"].as_str().unwrap_or(""), f["lineNumber"]);
        *by_fn.entry(key).or_default() += us;
    }
    let mut v: Vec<_> = by_fn.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.into_iter().take(n).map(|(k, us)| json!([k, (us / 1000.0).round()])).collect()
}

async fn measure(workers: u32, rate: f64, scenario: &str, seconds: u64) -> (Step, Option<(Browser, Server)>) {
    let dp_ranks = env_secs("KVSCOPE_BENCH_DP_RANKS", 1) as u32;
    let (w, r, dp) = (workers.to_string(), rate.to_string(), dp_ranks.to_string());
    let mut args = vec!["demo", "--scenario", scenario, "--workers", &w, "--rate", &r, "--dp-ranks", &dp];
    if std::env::var("KVSCOPE_BENCH_NO_PLANE").as_deref() == Ok("1") {
        args.push("--no-event-plane");
    }
    let server = Server::start(&args, 0).await;
    let sources = workers * dp_ranks;
    let b = Browser::start().await;
    // Extra page settings, e.g. KVSCOPE_BENCH_QUERY="mem=64" for a 64 MiB retention bound.
    let query = std::env::var("KVSCOPE_BENCH_QUERY").unwrap_or_default();
    let url = if query.is_empty() { server.url.clone() } else { format!("{}?{query}", server.url.trim_end_matches('/')) };
    // KVSCOPE_BENCH_PROFILE_STARTUP=1: a CPU profile from navigation to the end of the warm-up.
    let profile_startup = std::env::var("KVSCOPE_BENCH_PROFILE_STARTUP").as_deref() == Ok("1");
    if profile_startup {
        b.cdp("Profiler.enable", json!({})).await;
        b.cdp("Profiler.setSamplingInterval", json!({"interval": 200})).await;
        b.cdp("Profiler.start", json!({})).await;
    }
    b.open(&url).await;
    b.wait_for(
        &format!("const e = document.querySelector('[data-testid=\"fleet-sources\"]'); return !!e && Number(e.textContent) >= {sources}"),
        Duration::from_secs(60),
        "every source in the overview",
    )
    .await;
    // Warm up (wasm compile, first history burst), then reset the long-task record.
    tokio::time::sleep(Duration::from_secs(3)).await;
    if profile_startup {
        let profile = b.cdp("Profiler.stop", json!({})).await;
        let _ = std::fs::write(artifacts_dir().join("bench-startup.cpuprofile"), profile["profile"].to_string());
        let tasks = b.js("return window.__kvTasks || [];").await;
        println!("BENCH {}", json!({"kind": "startup_profile", "tasks": tasks, "top_self_ms": top_self_time(&profile["profile"], 25)}));
    }
    if std::env::var("KVSCOPE_TRACE").as_deref() == Ok("1") {
        let path = artifacts_dir().join("bench-startup-trace.json");
        let events = b.trace_events().await;
        let long = long_tasks_on_cpu(&events, server.url.trim_end_matches('/'));
        let _ = std::fs::write(&path, json!({ "traceEvents": events }).to_string());
        println!("BENCH {}", json!({"kind": "startup_trace", "path": path.display().to_string(), "long_tasks_wall_and_cpu_ms": long}));
    }
    let startup = b.js("return window.__kvLongest || 0;").await.as_f64().unwrap_or(0.0);
    let startup_tasks = b.js("return window.__kvTasks || [];").await;
    let _ = b.js("window.__kvLongest = 0; window.__kvLongTasks = 0; window.__kvTasks = []; window.__kvFrames = []; return true;").await;
    b.cdp("Performance.enable", json!({})).await;
    let busy0 = main_thread_seconds(&b).await;
    let cpu0 = server.cpu_seconds();
    let served0 = server.metric_sum("kvscope_frames_total").await;
    let f0 = frames_shown(&b).await;
    let t0 = Instant::now();
    let profile_secs = env_secs("KVSCOPE_BENCH_PROFILE_SECONDS", 0).min(seconds);
    if profile_secs > 0 && seconds > 30 {
        tokio::time::sleep(Duration::from_secs(seconds - profile_secs)).await;
        b.cdp("Profiler.enable", json!({})).await;
        b.cdp("Profiler.start", json!({})).await;
        tokio::time::sleep(Duration::from_secs(profile_secs)).await;
        let profile = b.cdp("Profiler.stop", json!({})).await;
        let profile = &profile["profile"];
        let _ = std::fs::write(artifacts_dir().join("bench-soak.cpuprofile"), profile.to_string());
        println!("BENCH {}", json!({"kind": "profile", "seconds": profile_secs, "top_self_ms": top_self_time(profile, 25)}));
    } else {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    }
    let f1 = frames_shown(&b).await;
    let dt = t0.elapsed().as_secs_f64();
    let busy1 = main_thread_seconds(&b).await;
    let share = |i: usize| ((busy1[i] - busy0[i]) / dt * 1000.0).round() / 1000.0;
    let main_thread = json!({"task": share(0), "script": share(1), "layout": share(2), "style": share(3)});
    let server_cores = cpu0.zip(server.cpu_seconds()).map(|(a, b)| ((b - a) / dt * 100.0).round() / 100.0);
    let server_fps = served0.zip(server.metric_sum("kvscope_frames_total").await).map(|(a, b)| ((b - a) / dt).round());
    let longest = b.js("return window.__kvLongest || 0;").await.as_f64().unwrap_or(0.0);
    let long_tasks = b.js("return window.__kvLongTasks || 0;").await.as_u64().unwrap_or(0);
    let tasks = b.js("return window.__kvTasks || [];").await;
    if seconds > 30 {
        let frames = b.js("return window.__kvFrames || [];").await;
        println!("BENCH {}", json!({"kind": "long_tasks", "seconds": seconds, "tasks": tasks, "long_animation_frames": frames}));
    }
    let lagged = b.js("return !document.querySelector('[data-testid=\"lagged\"]').hidden;").await.as_bool().unwrap_or(false);
    let data_quality = b
        .js("const e = document.querySelector('[data-testid=\"data-quality\"]');\
             return e ? Array.from(e.querySelectorAll('.dq-item, .dq-span, .dq-sources')).map(x => x.textContent).join('; ') : '';")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let step = Step {
        startup_longest_task_ms: startup,
        offered_fps: f64::from(sources) * rate,
        ingested_fps: (f1.saturating_sub(f0)) as f64 / dt,
        longest_task_ms: longest,
        long_tasks,
        lagged,
        data_quality,
        startup_tasks,
        main_thread,
        server_cores,
        server_fps,
    };
    (step, Some((b, server)))
}

/// A capture opened in the page (issue 22: "opening a capture"): from choosing the file until
/// every frame is on the cards, with no server and no fleet on the cores, against `kvscope check`
/// of the same file natively, timed in the same run. Long tasks and the main thread's share are
/// those of the opening alone (the page's own start-up is done before the file is chosen).
async fn open_capture(capture: &std::path::Path) {
    let block_size = env_secs("KVSCOPE_BENCH_BLOCK_SIZE", 16) as u32;
    let bytes = std::fs::metadata(capture).unwrap_or_else(|e| panic!("{}: {e}", capture.display())).len();
    // The baseline: the native check of the same bytes (best of three, after one warm-up).
    let mut check_seconds = f64::INFINITY;
    let mut check = Value::Null;
    for run in 0..4 {
        let t = Instant::now();
        check = check_json(capture, block_size, "fixed");
        if run > 0 {
            check_seconds = check_seconds.min(t.elapsed().as_secs_f64());
        }
    }
    let sources = check["sources"].as_array().cloned().unwrap_or_default();
    let frames: u64 = sources.iter().map(|s| s["frames"].as_u64().unwrap_or(0)).sum();
    let events: u64 = sources.iter().map(|s| s["events"].as_u64().unwrap_or(0)).sum();
    assert!(frames > 0, "{}: check found no frames", capture.display());

    let stat = StaticServer::start(root().join("dist")).await;
    let b = Browser::start().await;
    b.open(&format!("{}?bs={block_size}", stat.url.trim_end_matches('/'))).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let startup_tasks = b.js("return window.__kvTasks || [];").await;
    let _ = b.js("window.__kvLongest = 0; window.__kvLongTasks = 0; window.__kvTasks = []; return true;").await;
    b.cdp("Performance.enable", json!({})).await;
    let busy0 = main_thread_seconds(&b).await;
    let input = b
        .client
        .find(fantoccini::Locator::Css("[data-testid=\"capture-file\"]"))
        .await
        .unwrap_or_else(|e| panic!("the page's file input: {e}"));
    // Where the opening's time goes, as the page shows it: when the capture bar's phase turns
    // from "reading and classifying" to "classifying" (the file's last slice is in), and when it
    // says "done". Noted by the page itself as the bar changes, so the bench's own polling
    // neither adds to the main thread's work nor rounds the times.
    b.js("const bar = document.querySelector('.capture-bar'); const t0 = performance.now(); const at = window.__kvPhases = {};\
         new MutationObserver(() => {\
           const text = bar.textContent; const done = !!bar.querySelector('[data-testid=\"capture-done\"]');\
           if (at.read_seconds === undefined && (done || (text.includes('classifying') && !text.includes('reading'))))\
             at.read_seconds = (performance.now() - t0) / 1000;\
           if (at.classified_seconds === undefined && done) at.classified_seconds = (performance.now() - t0) / 1000;\
         }).observe(bar, {subtree: true, childList: true, characterData: true});\
         return true;")
        .await;
    let t0 = Instant::now();
    let path = capture.to_str().unwrap_or_else(|| panic!("{} is not UTF-8", capture.display()));
    input.send_keys(path).await.unwrap_or_else(|e| panic!("choosing {path}: {e}"));
    let script = format!(
        "return !!document.querySelector('[data-testid=\"capture-done\"]') && \
         Number(document.querySelector('[data-testid=\"fleet-frames\"]').textContent) === {frames};"
    );
    b.wait_for(&script, Duration::from_secs(900), "every frame of the capture on the cards").await;
    let page_seconds = t0.elapsed().as_secs_f64();
    let busy1 = main_thread_seconds(&b).await;
    // The engine workers the page ran, as it says itself (`?engines=`, KVSCOPE_E2E_ENGINES).
    let engines = b.js("const e = document.querySelector('[data-engines]'); return e ? Number(e.dataset.engines) : null;").await;
    let share = |i: usize| ((busy1[i] - busy0[i]) / page_seconds * 1000.0).round() / 1000.0;
    let record = json!({
        "kind": "capture", "file": capture.display().to_string(), "bytes": bytes, "sources": sources.len(),
        "engines": engines,
        "frames": frames, "events": events, "block_size": block_size,
        "check_seconds": check_seconds, "page_seconds": page_seconds,
        "phases": b.js("return window.__kvPhases || null;").await,
        "page_vs_check": check_seconds / page_seconds,
        "long_tasks": b.js("return window.__kvLongTasks || 0;").await,
        "longest_task_ms": b.js("return window.__kvLongest || 0;").await,
        "startup_tasks": startup_tasks,
        "main_thread": {"task": share(0), "script": share(1), "layout": share(2), "style": share(3)},
    });
    println!("BENCH {record}");
    b.screenshot("bench-capture").await;
    b.assert_no_errors().await;
    b.close().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Some(why) = missing_prerequisite() {
        eprintln!("browser bench skipped: {why}");
        return;
    }
    if let Ok(capture) = std::env::var("KVSCOPE_BENCH_CAPTURE") {
        open_capture(std::path::Path::new(&capture)).await;
        return;
    }
    let workers = env_list("KVSCOPE_BENCH_WORKERS", "16,64");
    let rates = env_list("KVSCOPE_BENCH_RATES", "5,10,20,40,80,160");
    let step_secs = env_secs("KVSCOPE_BENCH_STEP_SECONDS", 15);
    let soak_secs = env_secs("KVSCOPE_BENCH_SOAK_SECONDS", 60);
    let scenario = std::env::var("KVSCOPE_BENCH_SCENARIO").unwrap_or_else(|_| "kimi-k3".into());
    let mut results = Vec::new();
    for &w in &workers {
        let w = w as u32;
        let mut best: Option<(f64, Step)> = None;
        for &rate in &rates {
            let (step, handles) = measure(w, rate, &scenario, step_secs).await;
            let ok = step.longest_task_ms < 50.0 && !step.lagged && step.ingested_fps >= 0.9 * step.offered_fps;
            println!(
                "BENCH {}",
                json!({
                    "kind": "step", "workers": w, "dp_ranks": env_secs("KVSCOPE_BENCH_DP_RANKS", 1), "scenario": scenario,
                    "rate_per_worker": rate, "offered_fps": step.offered_fps, "startup_longest_task_ms": step.startup_longest_task_ms,
                    "ingested_fps": (step.ingested_fps * 10.0).round() / 10.0, "longest_task_ms": step.longest_task_ms,
                    "long_tasks": step.long_tasks, "lagged": step.lagged, "responsive_and_keeping_up": ok,
                    "data_quality": step.data_quality, "startup_tasks": step.startup_tasks,
                    "main_thread": step.main_thread, "server_cores": step.server_cores, "server_fps": step.server_fps,
                })
            );
            if let Some((b, _server)) = handles {
                b.close().await;
            }
            if !ok {
                break;
            }
            best = Some((rate, step));
        }
        // KVSCOPE_BENCH_SOAK_ALWAYS=1: the sustained run (and its memory figures) at the first rate
        // even when it failed the bound, as the fleet figures of issue 8 ask for a fixed rate.
        let soak_always = std::env::var("KVSCOPE_BENCH_SOAK_ALWAYS").as_deref() == Ok("1");
        let best = best.or_else(|| soak_always.then(|| rates.first().map(|&r| (r, Step::default()))).flatten());
        let Some((rate, step)) = best else {
            println!("BENCH {}", json!({"kind": "max", "workers": w, "max_fps": null, "note": "even the lowest rate was not responsive"}));
            continue;
        };
        // Sustained run at the best rate, then memory.
        let (soak, handles) = measure(w, rate, &scenario, soak_secs).await;
        let memory = match &handles {
            Some((b, _)) => page_memory(b).await,
            None => Value::Null,
        };
        if let Some((b, _server)) = handles {
            let _ = b.screenshot(&format!("bench-{w}-workers")).await;
            b.close().await;
        }
        let line = json!({
            "kind": "max", "workers": w, "rate_per_worker": rate, "max_fps": (step.ingested_fps * 10.0).round() / 10.0,
            "soak_offered_fps": soak.offered_fps, "soak_long_tasks": soak.long_tasks,
            "longest_task_ms": step.longest_task_ms,
            "soak_seconds": soak_secs, "soak_ingested_fps": (soak.ingested_fps * 10.0).round() / 10.0,
            "soak_longest_task_ms": soak.longest_task_ms, "soak_startup_longest_task_ms": soak.startup_longest_task_ms,
            "soak_lagged": soak.lagged, "soak_data_quality": soak.data_quality, "soak_startup_tasks": soak.startup_tasks, "memory_after_soak": memory,
            "soak_main_thread": soak.main_thread, "soak_server_cores": soak.server_cores, "soak_server_fps": soak.server_fps,
            "dp_ranks": env_secs("KVSCOPE_BENCH_DP_RANKS", 1), "scenario": scenario,
        });
        println!("BENCH {line}");
        results.push(line);
    }
    let out = artifacts_dir().join("browser-bench.json");
    let _ = std::fs::write(&out, serde_json::to_string_pretty(&results).unwrap_or_default());
    eprintln!("wrote {}", out.display());
}
