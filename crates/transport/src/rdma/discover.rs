//! RDMA device discovery through libibverbs: which devices and ports this machine has, or
//! exactly what is missing when it has none.

use std::ffi::CStr;
use std::fmt;
use std::path::Path;

use rdma_sys::{
    ___ibv_query_port, ibv_close_device, ibv_device_attr, ibv_free_device_list,
    ibv_get_device_guid, ibv_get_device_list, ibv_get_device_name, ibv_open_device, ibv_port_attr,
    ibv_port_state, ibv_query_device,
};

use crate::error::TransportError;

/// Where the kernel lists RDMA devices (the `ib_core` class directory).
pub const SYSFS_CLASS_DIR: &str = "/sys/class/infiniband";
/// Where user-space verbs reach them (`ib_uverbs` character devices).
pub const DEV_DIR: &str = "/dev/infiniband";

/// One port of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPort {
    /// Port number (from 1).
    pub number: u8,
    /// `ACTIVE`, `DOWN`, … (`ibv_port_state_str` names).
    pub state: &'static str,
    /// `InfiniBand`, `Ethernet` (RoCE) or `unspecified`.
    pub link_layer: &'static str,
    /// LID (InfiniBand only; 0 on Ethernet).
    pub lid: u16,
}

/// One RDMA device and its ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDevice {
    /// Device name (`mlx5_0`, `rxe0`, …).
    pub name: String,
    /// Node GUID, as the kernel reports it (network byte order, shown as hex).
    pub guid: u64,
    /// Its ports; empty if the device could not be opened (see `open_error`).
    pub ports: Vec<RdmaPort>,
    /// Why the device could not be opened or queried, if it could not.
    pub open_error: Option<String>,
}

impl fmt::Display for RdmaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (guid {:016x})", self.name, u64::from_be(self.guid))?;
        if let Some(e) = &self.open_error {
            return write!(f, ": cannot open: {e}");
        }
        for p in &self.ports {
            write!(
                f,
                "; port {} {} {} lid {}",
                p.number, p.state, p.link_layer, p.lid
            )?;
        }
        Ok(())
    }
}

fn port_state(s: ibv_port_state::Type) -> &'static str {
    match s {
        ibv_port_state::IBV_PORT_DOWN => "DOWN",
        ibv_port_state::IBV_PORT_INIT => "INIT",
        ibv_port_state::IBV_PORT_ARMED => "ARMED",
        ibv_port_state::IBV_PORT_ACTIVE => "ACTIVE",
        ibv_port_state::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

fn link_layer(l: u8) -> &'static str {
    // IBV_LINK_LAYER_* are #defines in <infiniband/verbs.h>: 1 InfiniBand, 2 Ethernet.
    match l {
        1 => "InfiniBand",
        2 => "Ethernet",
        _ => "unspecified",
    }
}

/// What the machine lacks, checked on the filesystem, for the no-device error.
pub fn missing() -> String {
    let entries = |dir: &str| -> Option<Vec<String>> {
        let rd = std::fs::read_dir(dir).ok()?;
        Some(
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
        )
    };
    match (entries(SYSFS_CLASS_DIR), Path::new(DEV_DIR).exists()) {
        (None, _) => format!("this kernel exposes no RDMA devices (no {SYSFS_CLASS_DIR})"),
        (Some(list), _) if list.is_empty() => {
            format!("this kernel exposes no RDMA devices ({SYSFS_CLASS_DIR} is empty)")
        }
        (Some(list), false) => format!(
            "the kernel lists {} in {SYSFS_CLASS_DIR} but there is no {DEV_DIR} \
             (is ib_uverbs loaded, and {DEV_DIR} visible in this container?)",
            list.join(", ")
        ),
        (Some(list), true) => format!(
            "the kernel lists {} in {SYSFS_CLASS_DIR} but libibverbs found no provider for \
             them (is the provider library, e.g. ibverbs-providers, installed?)",
            list.join(", ")
        ),
    }
}

fn unavailable(reason: String) -> TransportError {
    TransportError::FabricUnavailable {
        fabric: "RDMA",
        reason,
    }
}

/// Lists the RDMA devices libibverbs sees, with their ports. No device is an error that
/// names what is missing (never an empty success).
pub fn discover() -> Result<Vec<RdmaDevice>, TransportError> {
    let mut n: libc::c_int = 0;
    // SAFETY: `n` is writable; the list (if any) is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: strerror returns a NUL-terminated string for any errno; copied at once.
        let what = unsafe { CStr::from_ptr(libc::strerror(errno)) }.to_string_lossy();
        return Err(unavailable(format!(
            "no RDMA device: ibv_get_device_list returned NULL (errno {errno}: {what}); {}",
            missing()
        )));
    }
    let mut devices = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` valid device pointers (then a NULL).
        let dev = unsafe { *list.add(i) };
        if dev.is_null() {
            break;
        }
        devices.push(describe(dev));
    }
    // SAFETY: frees the list we got above, once, after its last use.
    unsafe { ibv_free_device_list(list) };
    if devices.is_empty() {
        return Err(unavailable(format!(
            "no RDMA device: ibv_get_device_list returned an empty list; {}",
            missing()
        )));
    }
    Ok(devices)
}

fn describe(dev: *mut rdma_sys::ibv_device) -> RdmaDevice {
    // SAFETY: `dev` is a live entry of the device list; the name is a NUL-terminated string
    // owned by it, copied before the list is freed.
    let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    let guid = unsafe { ibv_get_device_guid(dev) };
    let mut device = RdmaDevice {
        name,
        guid,
        ports: Vec::new(),
        open_error: None,
    };
    // SAFETY: opens a context on a live device; closed below.
    let ctx = unsafe { ibv_open_device(dev) };
    if ctx.is_null() {
        device.open_error = Some(format!(
            "ibv_open_device: {}",
            std::io::Error::last_os_error()
        ));
        return device;
    }
    // SAFETY: a plain C struct of integers and arrays: all zeroes is a valid value.
    let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: live context, writable attr.
    if unsafe { ibv_query_device(ctx, &mut attr) } != 0 {
        device.open_error = Some(format!(
            "ibv_query_device: {}",
            std::io::Error::last_os_error()
        ));
    } else {
        for number in 1..=attr.phys_port_cnt {
            // SAFETY: a plain C struct of integers: all zeroes is a valid value.
            let mut port: ibv_port_attr = unsafe { std::mem::zeroed() };
            // SAFETY: live context, a port number the device reported, writable attr.
            if unsafe { ___ibv_query_port(ctx, number, &mut port) } == 0 {
                device.ports.push(RdmaPort {
                    number,
                    state: port_state(port.state),
                    link_layer: link_layer(port.link_layer),
                    lid: port.lid,
                });
            }
        }
    }
    // SAFETY: closes the context opened above, once.
    unsafe { ibv_close_device(ctx) };
    device
}
