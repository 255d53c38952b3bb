//! The crate's one error type and its mapping onto Python exceptions.

use pyo3::exceptions::{PyConnectionError, PyKeyError, PyTimeoutError, PyValueError};
use pyo3::PyErr;

/// What a native call can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NativeError {
    /// An argument is not what the call takes.
    #[error("{0}")]
    Invalid(String),
    /// No preset of that name.
    #[error("unknown model `{name}` (expected one of {known})")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The presets there are.
        known: String,
    },
    /// The network or the peer failed before an HTTP answer was complete.
    #[error("{0}")]
    Transport(String),
    /// A bound on time passed.
    #[error("{0}")]
    Timeout(String),
}

impl From<NativeError> for PyErr {
    fn from(e: NativeError) -> PyErr {
        let text = e.to_string();
        match e {
            NativeError::Invalid(_) => PyValueError::new_err(text),
            NativeError::UnknownModel { .. } => PyKeyError::new_err(text),
            NativeError::Transport(_) => PyConnectionError::new_err(text),
            NativeError::Timeout(_) => PyTimeoutError::new_err(text),
        }
    }
}

impl NativeError {
    /// A ureq failure, as a timeout or a transport error, naming what was being done.
    pub(crate) fn from_ureq(doing: &str, e: ureq::Error) -> NativeError {
        match e {
            ureq::Error::Timeout(t) => NativeError::Timeout(format!("{doing}: timed out ({t})")),
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                NativeError::Timeout(format!("{doing}: timed out ({io})"))
            }
            other => NativeError::Transport(format!("{doing}: {other}")),
        }
    }

    /// An I/O failure while reading a body.
    pub(crate) fn from_io(doing: &str, e: std::io::Error) -> NativeError {
        let inner_timeout = e
            .get_ref()
            .and_then(|r| r.downcast_ref::<ureq::Error>())
            .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
        if inner_timeout {
            return NativeError::Timeout(format!("{doing}: timed out ({e})"));
        }
        if matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ) {
            return NativeError::Timeout(format!("{doing}: timed out ({e})"));
        }
        NativeError::Transport(format!("{doing}: {e}"))
    }
}
