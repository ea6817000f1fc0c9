fn main() {
    kvscope_web::start_in_next_task();
}
