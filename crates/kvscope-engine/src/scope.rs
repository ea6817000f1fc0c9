//! The few browser services the engine needs, from whichever global scope it runs in: a
//! dedicated worker's (the dashboard) or a window's (the component tests run the engine in the
//! page). `web_sys::window()` is `None` in a worker, so nothing here may use it.

use wasm_bindgen::JsCast;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

/// The global scope, looked up once.
#[derive(Clone)]
enum Global {
    Worker(web_sys::WorkerGlobalScope),
    Window(web_sys::Window),
    /// Not a browser (native tests).
    None,
}

thread_local! {
    static GLOBAL: Global = {
        let g = js_sys::global();
        if let Ok(w) = g.clone().dyn_into::<web_sys::WorkerGlobalScope>() {
            Global::Worker(w)
        } else if let Ok(w) = g.dyn_into::<web_sys::Window>() {
            Global::Window(w)
        } else {
            Global::None
        }
    };
    // Looked up once: two calls into JS per message otherwise (6% of the time at 512 sources).
    static PERFORMANCE: Option<web_sys::Performance> = GLOBAL.with(|g| match g {
        Global::Worker(w) => w.performance(),
        Global::Window(w) => w.performance(),
        Global::None => None,
    });
}

/// Milliseconds since the scope started (`performance.now()`); 0 outside a browser.
pub fn now_ms() -> f64 {
    PERFORMANCE.with(|p| p.as_ref().map_or(0.0, web_sys::Performance::now))
}

/// Calls `f` after `ms` milliseconds (once). Does nothing outside a browser.
pub fn set_timeout(f: &js_sys::Function, ms: i32) {
    GLOBAL.with(|g| {
        let _ = match g {
            Global::Worker(w) => w.set_timeout_with_callback_and_timeout_and_arguments_0(f, ms),
            Global::Window(w) => w.set_timeout_with_callback_and_timeout_and_arguments_0(f, ms),
            Global::None => Ok(0),
        };
    });
}

/// Runs `f` once after `ms` milliseconds.
pub fn after_ms(ms: i32, f: impl FnOnce() + 'static) {
    let cb = wasm_bindgen::closure::Closure::once_into_js(f);
    set_timeout(cb.unchecked_ref(), ms);
}

/// A message channel that resumes [`yield_now`]'s callers: a message posted to oneself comes
/// back as a task at once, where a timer nested more than a few deep waits at least 4 ms (the
/// HTML timer clamp), which cost a capture's opening about a tenth of its time in 12 ms slices.
struct YieldChannel {
    port: web_sys::MessagePort,
    waiting: std::rc::Rc<std::cell::RefCell<std::collections::VecDeque<js_sys::Function>>>,
    _on_message: wasm_bindgen::closure::Closure<dyn FnMut()>,
}

thread_local! {
    static YIELD: Option<YieldChannel> = {
        let channel = web_sys::MessageChannel::new().ok();
        channel.map(|c| {
            let waiting = std::rc::Rc::new(std::cell::RefCell::new(std::collections::VecDeque::<js_sys::Function>::new()));
            let queue = waiting.clone();
            let on_message = wasm_bindgen::closure::Closure::<dyn FnMut()>::new(move || {
                let next = queue.borrow_mut().pop_front();
                if let Some(resolve) = next {
                    let _ = resolve.call0(&JsValue::UNDEFINED);
                }
            });
            c.port1().set_onmessage(Some(on_message.as_ref().unchecked_ref()));
            YieldChannel { port: c.port2(), waiting, _on_message: on_message }
        })
    };
}

/// Lets the event loop run other tasks (socket messages, the page's requests, a summary's
/// timer) before going on.
pub async fn yield_now() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        let posted = YIELD.with(|y| {
            y.as_ref().is_some_and(|y| {
                y.waiting.borrow_mut().push_back(resolve.clone());
                let posted = y.port.post_message(&JsValue::UNDEFINED).is_ok();
                if !posted {
                    y.waiting.borrow_mut().pop_back();
                }
                posted
            })
        });
        if !posted {
            set_timeout(&resolve, 0);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// `fetch(url)` from this scope.
pub async fn fetch(url: &str) -> Result<web_sys::Response, String> {
    let promise = GLOBAL.with(|g| match g {
        Global::Worker(w) => Ok(w.fetch_with_str(url)),
        Global::Window(w) => Ok(w.fetch_with_str(url)),
        Global::None => Err("no browser to fetch from".to_owned()),
    })?;
    let response = JsFuture::from(promise).await.map_err(|e| format!("the request failed: {}", js_text(&e)))?;
    response.dyn_into().map_err(|_| "the answer is not an HTTP response".to_owned())
}

/// The bytes of the wasm linear memory this engine runs in.
pub fn wasm_memory_bytes() -> u64 {
    wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .map_or(0, |m| m.buffer().dyn_into::<js_sys::ArrayBuffer>().map_or(0, |b| b.byte_length() as u64))
}

/// A JS error or value in words.
pub fn js_text(v: &JsValue) -> String {
    v.as_string().or_else(|| v.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message()))).unwrap_or_else(|| format!("{v:?}"))
}
