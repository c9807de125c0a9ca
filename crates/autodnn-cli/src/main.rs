fn main() {
    println!("autodnn {}", autodnn::VERSION);
}
