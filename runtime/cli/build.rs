//! Embeds an rpath to libtorch's lib/ in the `sagessd` binary (with feature `train`), so it runs
//! without LD_LIBRARY_PATH (torch-sys reports the folder as DEP_TCH_LIBTORCH_LIB); with feature
//! `cuda`, links libtorch_cuda, which nothing references by name (its kernels register
//! themselves when it loads), so that `--as-needed` keeps it.
fn main() {
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
    }
}
