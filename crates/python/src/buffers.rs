//! Python buffers (the buffer protocol) seen as byte slices for the length of one call.
//!
//! The [`PyBuffer`] is held for the whole call, so the exporter cannot free or resize the
//! memory meanwhile (a `bytearray` refuses to resize while exported); the slices made from it
//! are used with the GIL released and dropped before the call returns.

use pyo3::buffer::PyBuffer;

use crate::error::NativeError;

/// A C-contiguous buffer's address and length, checked once with the GIL held.
#[derive(Clone, Copy)]
pub(crate) struct RawBytes {
    ptr: usize,
    len: usize,
}

impl RawBytes {
    /// Checks `buf` is C-contiguous (and writable if `writable`), and takes its address.
    pub(crate) fn of(buf: &PyBuffer<u8>, writable: bool, what: &str) -> Result<Self, NativeError> {
        if !buf.is_c_contiguous() {
            return Err(NativeError::Invalid(format!(
                "{what}: expected a C-contiguous buffer, found a strided one"
            )));
        }
        if writable && buf.readonly() {
            return Err(NativeError::Invalid(format!(
                "{what}: expected a writable buffer, found a read-only one"
            )));
        }
        Ok(RawBytes {
            ptr: buf.buf_ptr() as usize,
            len: buf.len_bytes(),
        })
    }

    /// Bytes in the buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes, read-only.
    ///
    /// # Safety
    /// The [`PyBuffer`] this came from must be alive for `'a`.
    pub(crate) unsafe fn slice<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the caller keeps the exporting buffer alive; `of` checked contiguity.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }

    /// The bytes, writable.
    ///
    /// # Safety
    /// The [`PyBuffer`] this came from must be alive and writable for `'a`, and no other slice
    /// of it in use meanwhile.
    pub(crate) unsafe fn slice_mut<'a>(&self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as above, and `of` checked the buffer is writable.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len) }
    }
}
