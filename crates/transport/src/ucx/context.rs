//! [`Context`]: one UCP context, configured from [`crate::config::UcxTuning`]; and the
//! translation of UCX statuses into [`TransportError`]s.
//!
//! Settings go through `ucp_config_read` (which also reads `UCX_*` from the environment) and
//! then `ucp_config_modify`, in this order: `TLS` from the tuning (unless empty), the
//! keep-alive interval from `keep_alive_ms`, then the tuning's extra settings. A context is
//! created, used and destroyed on the progress thread only (it is not `Send`).

use std::ffi::CString;
use std::ptr;

use ucx_sys::{
    status_string, ucp_cleanup, ucp_config_modify, ucp_config_read, ucp_config_release,
    ucp_config_t, ucp_context_h, ucp_feature_UCP_FEATURE_RMA, ucp_feature_UCP_FEATURE_STREAM,
    ucp_feature_UCP_FEATURE_WAKEUP, ucp_init, ucp_params_field_UCP_PARAM_FIELD_FEATURES,
    ucp_params_t, ucs_status_t,
};

use crate::config::TransportConfig;
use crate::error::TransportError;

/// `Ok` for `UCS_OK`, else the status as a [`TransportError`] naming `call`. Statuses that mean
/// "nothing here to run on" become [`TransportError::FabricUnavailable`].
pub(crate) fn check(call: &'static str, status: ucs_status_t) -> Result<(), TransportError> {
    if status == ucs_status_t::UCS_OK {
        return Ok(());
    }
    Err(error(call, status))
}

/// The status of a failed `call` as a [`TransportError`].
pub(crate) fn error(call: &'static str, status: ucs_status_t) -> TransportError {
    let reason = status_string(status);
    if status == ucs_status_t::UCS_ERR_NO_DEVICE || status == ucs_status_t::UCS_ERR_UNSUPPORTED {
        return TransportError::FabricUnavailable {
            fabric: "UCX",
            reason: format!("`{call}`: {reason}"),
        };
    }
    TransportError::Fabric {
        fabric: "UCX",
        call,
        reason,
    }
}

/// The settings applied to a context, in order.
pub(crate) fn settings(config: &TransportConfig) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !config.ucx.tls.is_empty() {
        out.push(("TLS".to_string(), config.ucx.tls.clone()));
    }
    // With peer error handling UCX probes idle endpoints; a dead peer is noticed within this.
    out.push((
        "KEEPALIVE_INTERVAL".to_string(),
        format!("{}ms", config.keep_alive_ms),
    ));
    out.extend(config.ucx.settings.iter().cloned());
    out
}

/// Releases a `ucp_config_t` however `Context::new` ends.
struct ConfigGuard(*mut ucp_config_t);

impl Drop for ConfigGuard {
    fn drop(&mut self) {
        // SAFETY: the pointer came from a successful ucp_config_read and is released once.
        unsafe { ucp_config_release(self.0) };
    }
}

/// An initialised UCP context (streams, one-sided reads, wake-up events).
pub(crate) struct Context {
    handle: ucp_context_h,
}

impl Context {
    /// Reads the UCX config, applies [`settings`], and initialises a context: streams,
    /// one-sided reads (get mode) and wake-up events (what the progress thread sleeps on).
    pub(crate) fn new(config: &TransportConfig) -> Result<Context, TransportError> {
        Context::with_features(
            config,
            ucp_feature_UCP_FEATURE_STREAM
                | ucp_feature_UCP_FEATURE_RMA
                | ucp_feature_UCP_FEATURE_WAKEUP,
        )
    }

    fn with_features(
        config: &TransportConfig,
        features: ucx_sys::ucp_feature,
    ) -> Result<Context, TransportError> {
        let mut raw: *mut ucp_config_t = ptr::null_mut();
        // SAFETY: null prefix and file mean the default `UCX_` prefix and no config file; `raw`
        // is a valid place for the result.
        check("ucp_config_read", unsafe {
            ucp_config_read(ptr::null(), ptr::null(), &mut raw)
        })?;
        let guard = ConfigGuard(raw);
        for (name, value) in settings(config) {
            // validate() refused NUL bytes, so these conversions cannot fail.
            let (n, v) = (cstring(&name)?, cstring(&value)?);
            // SAFETY: `guard.0` is a live config; both strings are NUL-terminated and outlive
            // the call (UCX copies them).
            let status = unsafe { ucp_config_modify(guard.0, n.as_ptr(), v.as_ptr()) };
            if status != ucs_status_t::UCS_OK {
                return Err(TransportError::Config {
                    field: "ucx.settings",
                    reason: format!("UCX refused {name} = {value:?}: {}", status_string(status)),
                });
            }
        }
        let params = ucp_params_t {
            field_mask: ucp_params_field_UCP_PARAM_FIELD_FEATURES as u64,
            features: features as u64,
            ..Default::default()
        };
        let mut handle: ucp_context_h = ptr::null_mut();
        // SAFETY: params and config are valid for the call; `handle` receives the context.
        let status = unsafe { ucp_init(&params, guard.0, &mut handle) };
        check("ucp_init", status).map_err(|e| match e {
            TransportError::FabricUnavailable { fabric, reason } => {
                let tls = match config.ucx.tls.as_str() {
                    "" => "<UCX_TLS from the environment>",
                    tls => tls,
                };
                TransportError::FabricUnavailable {
                    fabric,
                    reason: format!(
                        "no usable UCX transport for TLS={tls:?} ({reason}); `ucx_info -d` \
                         lists what this machine has"
                    ),
                }
            }
            other => other,
        })?;
        Ok(Context { handle })
    }

    /// The raw handle, for creating a worker.
    pub(crate) fn handle(&self) -> ucp_context_h {
        self.handle
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context was initialised by ucp_init; its worker (the only object made
        // from it) is destroyed first (see `Worker`'s field order).
        unsafe { ucp_cleanup(self.handle) };
    }
}

fn cstring(s: &str) -> Result<CString, TransportError> {
    CString::new(s).map_err(|_| TransportError::Config {
        field: "ucx.settings",
        reason: format!("expected no NUL byte, found one in {s:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_apply_tls_then_keepalive_then_extras() {
        let mut config = TransportConfig::default();
        config.ucx.settings = vec![("TCP_SNDBUF".into(), "4m".into())];
        let names: Vec<String> = settings(&config).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["TLS", "KEEPALIVE_INTERVAL", "TCP_SNDBUF"]);
        assert_eq!(settings(&config)[1].1, "10000ms");
        config.ucx.tls.clear();
        assert_eq!(
            settings(&config)[0].0,
            "KEEPALIVE_INTERVAL",
            "empty: UCX_TLS decides"
        );
    }

    #[test]
    fn missing_devices_are_unavailable_other_failures_are_calls() {
        let e = error("ucp_init", ucs_status_t::UCS_ERR_NO_DEVICE);
        assert!(
            matches!(e, TransportError::FabricUnavailable { fabric: "UCX", .. }),
            "{e}"
        );
        let e = error("ucp_ep_create", ucs_status_t::UCS_ERR_INVALID_PARAM);
        assert!(
            matches!(
                e,
                TransportError::Fabric {
                    call: "ucp_ep_create",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_context_initialises_on_tcp() {
        Context::new(&TransportConfig::default()).expect("UCX over TCP runs anywhere");
    }
}
