use programl::builder::{build, BuildOptions, Mode};
use programl::format::{write_graph, Format};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ctx = inkwell::context::Context::create();
    let m = programl::ir::load_module(&ctx, args[1].as_ref()).unwrap();
    let mode = if args.len() > 2 { Mode::Programl03 } else { Mode::Paper };
    let g = build(&m, &BuildOptions { mode });
    write_graph(&g, Format::Json, &mut std::io::stdout()).unwrap();
}
