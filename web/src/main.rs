fn main() {
    kvscope_web::start();
}
