//! Generates UCP bindings from the system headers found through pkg-config (`ucx.pc`, from
//! Debian's `libucx-dev`). The published `ucx-sys` crate wants a musl cross toolchain and does
//! not build here; this one binds exactly what is installed.

fn main() {
    let ucx = match pkg_config::Config::new()
        .atleast_version("1.10")
        .probe("ucx")
    {
        Ok(lib) => lib,
        Err(e) => panic!(
            "UCX development files not found through pkg-config ({e}); \
             install them with `apt-get install libucx-dev libclang-dev`"
        ),
    };
    let mut builder = bindgen::Builder::default()
        .header_contents("wrapper.h", "#include <ucp/api/ucp.h>\n")
        .allowlist_function("ucp_.*")
        .allowlist_function("ucs_status_string")
        .allowlist_type("ucp_.*")
        .allowlist_type("ucs_status_t")
        .allowlist_type("ucs_status_ptr_t")
        .allowlist_var("UCP_.*")
        .allowlist_var("UCS_.*")
        .newtype_enum("ucs_status_t")
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &ucx.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let bindings = builder
        .generate()
        .expect("bindgen could not parse <ucp/api/ucp.h>");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("ucp.rs"))
        .expect("write bindings");
}
