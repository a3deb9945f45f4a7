//! Embeds an rpath to libtorch's lib/ in this crate's test binaries: they link the library API
//! (`sagessd`, for its comparison engine), which the workspace builds with feature `train`, so
//! they run without LD_LIBRARY_PATH (torch-sys reports the folder as DEP_TCH_LIBTORCH_LIB).
fn main() {
    if let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
