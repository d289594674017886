//! Copies IR files (paths on stdin, one per line) into DIR (the first
//! argument), rewritten by `rewrite_for_llvm10` so that LLVM 10's parser
//! (upstream's llvm2graph-10) reads them: bench/python_vs_upstream.sh.
use std::io::BufRead;

fn main() {
    let out = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: llvm10 DIR < paths"));
    std::fs::create_dir_all(&out).unwrap();
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let path = std::path::PathBuf::from(line.unwrap());
        let ir = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = format!("{i:04}-{}", path.file_name().unwrap().to_string_lossy());
        std::fs::write(out.join(name), programl_testkit::rewrite_for_llvm10(&ir)).unwrap();
    }
}
