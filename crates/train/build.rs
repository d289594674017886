include!("../model/torch-link.rs");

fn main() {
    // programl-train and the test binaries link libtorch.
    torch_link();
}
