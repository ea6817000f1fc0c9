//! The kvscope engine worker: Trunk builds this bin as a Web Worker (`data-type="worker"` in
//! index.html), and the page starts it.

fn main() {
    kvscope_engine::worker::run();
}
