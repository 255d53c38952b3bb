//! A UDP socket with the kernel's segmentation offloads, for quiche (which, unlike quinn and
//! s2n-quic, leaves I/O to its caller): sends of up to 64 KiB cut into equal datagrams by the
//! kernel (`UDP_SEGMENT`), and receives that hand back runs of datagrams coalesced (`UDP_GRO`),
//! with the segment size in a control message. The same offloads quinn uses on this path.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use anyhow::{bail, Context};

const SOL_UDP: i32 = 17;
const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;
/// Bytes one send may carry (the kernel's bound on a UDP GSO send, less headers).
pub const SEND_BYTES: usize = 65_000;
/// Socket buffers, as the bench's QUIC tuning sets them.
const SOCKET_BUFFER: i32 = 4 << 20;

/// One datagram or run of them that arrived.
pub struct Received {
    /// Bytes in the receive buffer.
    pub len: usize,
    /// Each datagram's size but the last's (the last may be shorter).
    pub segment: usize,
    /// Who sent them.
    pub from: SocketAddr,
}

/// An IPv4 UDP socket, blocking for sends, polled for receives.
pub struct Socket {
    sock: UdpSocket,
    /// The address it is bound to.
    pub local: SocketAddr,
}

fn sockaddr(a: SocketAddr) -> anyhow::Result<libc::sockaddr_in> {
    let SocketAddr::V4(v4) = a else {
        bail!("expected an IPv4 address, found {a}")
    };
    // SAFETY: sockaddr_in is plain data; zero is a valid value for every field.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as u16;
    sa.sin_port = v4.port().to_be();
    sa.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
    Ok(sa)
}

/// A message naming `sa` and carrying `iov`, without control data; both must outlive its use.
fn message(sa: &mut libc::sockaddr_in, iov: &mut libc::iovec) -> libc::msghdr {
    // SAFETY: msghdr is plain data; zero is a valid value for every field.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = sa as *mut libc::sockaddr_in as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg
}

fn setsockopt(fd: i32, level: i32, name: i32, value: i32) -> anyhow::Result<()> {
    // SAFETY: the option value is an int that lives across the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const i32 as *const libc::c_void,
            4,
        )
    };
    if r != 0 {
        bail!(
            "setsockopt({level}, {name}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

impl Socket {
    /// Binds `addr`, with GRO on and 4 MiB buffers.
    pub fn bind(addr: SocketAddr) -> anyhow::Result<Socket> {
        let sock = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
        let fd = sock.as_raw_fd();
        setsockopt(fd, SOL_UDP, UDP_GRO, 1)?;
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, SOCKET_BUFFER)?;
        setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, SOCKET_BUFFER)?;
        let local = sock.local_addr()?;
        Ok(Socket { sock, local })
    }

    /// Sends `buf` to `to` as datagrams of `segment` bytes (the last may be shorter),
    /// waiting for room in the socket's buffer.
    pub fn send(&self, buf: &[u8], segment: usize, to: SocketAddr) -> anyhow::Result<()> {
        let mut sa = sockaddr(to)?;
        let mut iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let mut control = [0u64; 4];
        let mut msg = message(&mut sa, &mut iov);
        if buf.len() > segment {
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            // SAFETY: CMSG_SPACE/CMSG_LEN are arithmetic; the first header lies in `control`,
            // which is large enough for one u16 option.
            unsafe {
                msg.msg_controllen = libc::CMSG_SPACE(2) as usize;
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, segment as u16);
            }
        }
        loop {
            // SAFETY: msg points at live buffers of the stated lengths.
            if unsafe { libc::sendmsg(self.sock.as_raw_fd(), &msg, 0) } >= 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                bail!("sendmsg of {} bytes to {to}: {e}", buf.len());
            }
        }
    }

    /// What is waiting on the socket, into `buf`, without blocking.
    pub fn recv(&self, buf: &mut [u8]) -> anyhow::Result<Option<Received>> {
        // SAFETY: plain data, zero is valid.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let mut control = [0u64; 8];
        let mut msg = message(&mut sa, &mut iov);
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: msg points at live buffers of the stated lengths.
        let r = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            bail!("recvmsg: {e}");
        }
        let len = r as usize;
        let mut segment = len;
        // SAFETY: the kernel filled msg_control with well-formed headers of msg_controllen.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    segment = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const i32) as usize;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let ip = Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
        let from = SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sa.sin_port)));
        Ok(Some(Received { len, segment, from }))
    }

    /// Waits until a datagram is waiting or `timeout` has passed (forever without one).
    pub fn wait(&self, timeout: Option<Duration>) {
        let mut p = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: one live pollfd; the timespec, when given, outlives the call.
        unsafe { libc::ppoll(&mut p, 1, ts_ptr, std::ptr::null()) };
    }
}
