include!("torch-link.rs");

fn main() {
    // For this crate's own test binaries.
    torch_link();
}
