//! Raw UCP bindings (generated at build time from the installed `<ucp/api/ucp.h>`).
//!
//! Owns nothing but the FFI surface; the safe wrapper lives in `kvfabric-transport`'s `ucx`
//! module. UCS status-pointer helpers that are C macros in the headers are re-implemented
//! here as functions.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs
)]
#![allow(clippy::all, unreachable_pub, unsafe_op_in_unsafe_fn)]
#![allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]

include!(concat!(env!("OUT_DIR"), "/ucp.rs"));

const ERR_LAST: usize = ucs_status_t::UCS_ERR_LAST.0 as isize as usize;

/// `ucp_dt_make_contig(elem_size)`: the contiguous datatype of `elem_size`-byte elements
/// (a C macro in `<ucp/api/ucp.h>`). `ucp_dt_make_contig(1)` is UCP's default for byte buffers.
pub const fn ucp_dt_make_contig(elem_size: usize) -> ucp_datatype_t {
    ((elem_size as ucp_datatype_t) << ucp_dt_type_UCP_DATATYPE_SHIFT)
        | ucp_dt_type_UCP_DATATYPE_CONTIG as ucp_datatype_t
}

/// `ucp_init`: a `static inline` in the header, so bindgen emits nothing for it; it calls
/// [`ucp_init_version`] with the API version these bindings were generated from.
///
/// # Safety
///
/// As for `ucp_init`: `params` and `config` (which may be null) must be valid for the call and
/// `context_p` writable.
pub unsafe fn ucp_init(
    params: *const ucp_params_t,
    config: *const ucp_config_t,
    context_p: *mut ucp_context_h,
) -> ucs_status_t {
    ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, params, config, context_p)
}

/// The human-readable name of a status (`ucs_status_string`), owned.
pub fn status_string(status: ucs_status_t) -> String {
    // SAFETY: ucs_status_string returns a pointer to a static NUL-terminated string for any
    // status value (unknown ones map to a generic message), never null.
    let s = unsafe { std::ffi::CStr::from_ptr(ucs_status_string(status)) };
    s.to_string_lossy().into_owned()
}

/// `UCS_PTR_IS_ERR`: a status pointer that encodes an error.
pub fn ucs_ptr_is_err(ptr: ucs_status_ptr_t) -> bool {
    (ptr as usize) >= ERR_LAST
}

/// `UCS_PTR_IS_PTR`: a status pointer that is a real request handle.
pub fn ucs_ptr_is_ptr(ptr: ucs_status_ptr_t) -> bool {
    (ptr as usize).wrapping_sub(1) < ERR_LAST.wrapping_sub(1)
}

/// `UCS_PTR_STATUS`: `UCS_INPROGRESS` for a request handle, otherwise the encoded status
/// (`UCS_OK` for null).
pub fn ucs_ptr_status(ptr: ucs_status_ptr_t) -> ucs_status_t {
    if ucs_ptr_is_ptr(ptr) {
        ucs_status_t::UCS_INPROGRESS
    } else {
        ucs_status_t(ptr as isize as i8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_pointer_helpers_match_the_c_macros() {
        let ok = std::ptr::null_mut();
        assert!(!ucs_ptr_is_err(ok) && !ucs_ptr_is_ptr(ok));
        assert_eq!(ucs_ptr_status(ok), ucs_status_t::UCS_OK);
        let err = ucs_status_t::UCS_ERR_NO_MEMORY.0 as isize as ucs_status_ptr_t;
        assert!(ucs_ptr_is_err(err) && !ucs_ptr_is_ptr(err));
        assert_eq!(ucs_ptr_status(err), ucs_status_t::UCS_ERR_NO_MEMORY);
        let req = 0x1000 as ucs_status_ptr_t;
        assert!(ucs_ptr_is_ptr(req) && !ucs_ptr_is_err(req));
        assert_eq!(ucs_ptr_status(req), ucs_status_t::UCS_INPROGRESS);
    }

    #[test]
    fn contig_datatype_matches_the_c_macro() {
        // UCP_DATATYPE_SHIFT is 3 and UCP_DATATYPE_CONTIG 0 in every UCX release.
        assert_eq!(ucp_dt_make_contig(1), 8);
        assert_eq!(ucp_dt_make_contig(4), 32);
    }

    #[test]
    fn status_strings_are_readable() {
        assert_eq!(status_string(ucs_status_t::UCS_OK), "Success");
        assert!(!status_string(ucs_status_t::UCS_ERR_UNREACHABLE).is_empty());
    }

    #[test]
    fn the_installed_library_links_and_reports_its_version() {
        let (mut major, mut minor, mut release) = (0u32, 0u32, 0u32);
        // SAFETY: writes three integers through valid pointers.
        unsafe { ucp_get_version(&mut major, &mut minor, &mut release) };
        assert!(
            major >= 1 && (major > 1 || minor >= 10),
            "UCX {major}.{minor}.{release}"
        );
    }
}
