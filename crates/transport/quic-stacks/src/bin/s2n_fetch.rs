//! The bench's verified fetch over s2n-quic 1.91 (AWS; aws-lc for its crypto) on its defaults:
//! GSO and GRO on, MTU probing up to the link's, its own windows (in a draft not kept, 64 MiB
//! for the connection and 16 MiB per stream measured no better: README). One tokio worker per
//! process, as the bench runs quinn.
//!
//! ```text
//! s2n-fetch certs DIR
//! s2n-fetch serve ADDR DIR BLOCKS MTU
//! s2n-fetch fetch ADDR DIR BLOCKS ROUNDS MTU
//! ```

use std::net::SocketAddr;

use bytes::Bytes;
use kvfabric_quic_stacks::{self as w, Receiver};
use s2n_quic::client::Connect;
use s2n_quic::provider::io::tokio::{Builder as IoBuilder, Provider as Io};
use s2n_quic::{Client, Connection, Server};

fn io(addr: SocketAddr, mtu: u16) -> anyhow::Result<Io> {
    Ok(IoBuilder::default()
        .with_receive_address(addr)?
        .with_max_mtu(mtu)?
        .build()?)
}

async fn serve(addr: SocketAddr, dir: &str, blocks: u32, mtu: u16) -> anyhow::Result<()> {
    let data: Vec<Bytes> = (0..blocks).map(|i| Bytes::from(w::block(i))).collect();
    let cert = std::fs::read_to_string(format!("{dir}/cert.pem"))?;
    let key = std::fs::read_to_string(format!("{dir}/key.pem"))?;
    let mut server = Server::builder()
        .with_tls((cert.as_str(), key.as_str()))?
        .with_io(io(addr, mtu)?)?
        .start()?;
    println!("ready");
    while let Some(mut conn) = server.accept().await {
        let data = data.clone();
        tokio::spawn(async move {
            while let Ok(Some(mut stream)) = conn.accept_bidirectional_stream().await {
                let data = data.clone();
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    while req.len() < 4 {
                        match stream.receive().await {
                            Ok(Some(chunk)) => req.extend_from_slice(&chunk),
                            _ => return,
                        }
                    }
                    let reply = match u32::from_le_bytes([req[0], req[1], req[2], req[3]]) {
                        w::CPU_REQUEST => Bytes::from(w::cpu_seconds().to_le_bytes().to_vec()),
                        i => match data.get(i as usize) {
                            Some(b) => b.clone(),
                            None => return,
                        },
                    };
                    let _ = stream.send(reply).await;
                    let _ = stream.finish();
                });
            }
        });
    }
    Ok(())
}

/// Asks for `i` and receives the whole answer into `rx`.
async fn request(conn: &mut Connection, i: u32, rx: &mut Receiver) -> anyhow::Result<()> {
    let mut stream = conn.open_bidirectional_stream().await?;
    stream
        .send(Bytes::copy_from_slice(&i.to_le_bytes()))
        .await?;
    rx.reset();
    while let Some(chunk) = stream.receive().await? {
        rx.extend(&chunk);
    }
    Ok(())
}

fn fetch(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    dir: &str,
    blocks: u32,
    rounds: u32,
    mtu: u16,
) -> anyhow::Result<()> {
    let cert = std::fs::read_to_string(format!("{dir}/cert.pem"))?;
    let mut conn = rt.block_on(async {
        let client = Client::builder()
            .with_tls(cert.as_str())?
            .with_io(io("0.0.0.0:0".parse()?, mtu)?)?
            .start()?;
        let conn = client
            .connect(Connect::new(addr).with_server_name("localhost"))
            .await?;
        anyhow::Ok(conn)
    })?;
    w::measure("s2n-quic", mtu, blocks, rounds, |i, rx| {
        rt.block_on(request(&mut conn, i, rx))
    })?;
    conn.close(0u32.into());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rt = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
    };
    w::dispatch(
        |addr, dir, blocks, mtu| rt()?.block_on(serve(addr, dir, blocks, mtu)),
        |addr, dir, blocks, rounds, mtu| fetch(&rt()?, addr, dir, blocks, rounds, mtu),
    )
}
