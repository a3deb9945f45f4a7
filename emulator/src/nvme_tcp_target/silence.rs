//! How long a host may leave its connection silent, and the socket reader that holds to it.
//!
//! A socket's receive timeout (`SO_RCVTIMEO`) is read when a blocking read starts: a reader
//! already waiting keeps the timeout it started with, whatever is set meanwhile. The
//! connection's reader thread starts its next read as soon as a PDU is in, so when Connect
//! lifted the set-up timeout the read already waiting still ended after it, and an idle I/O
//! queue was closed ~30 s after its Connect (issue 25). So the limit is not the socket's: the
//! socket wakes its reader at a fixed tick, and [`PatientReader`] goes back to waiting unless
//! the host has been silent past the limit in force *now* ([`Silence`], which the connection
//! changes at Connect).

use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest a blocked read waits before it looks at the limit again.
const TICK: Duration = Duration::from_secs(1);

/// How long the host may be silent, shared between the connection (which sets it) and its
/// reader (which holds to it).
#[derive(Debug)]
pub(super) struct Silence {
    /// Milliseconds, or [`Self::NEVER`].
    limit_ms: AtomicU64,
}

impl Silence {
    const NEVER: u64 = u64::MAX;

    /// A limit of `limit` (`None`: never).
    pub(super) fn new(limit: Option<Duration>) -> Arc<Self> {
        let s = Arc::new(Self {
            limit_ms: AtomicU64::new(Self::NEVER),
        });
        s.set(limit);
        s
    }

    /// From now on the host may be silent `limit` (`None`: for ever, as an I/O queue or an
    /// admin queue without a keep-alive timeout may).
    pub(super) fn set(&self, limit: Option<Duration>) {
        let ms = limit.map_or(Self::NEVER, |l| {
            u64::try_from(l.as_millis()).unwrap_or(Self::NEVER - 1)
        });
        self.limit_ms.store(ms, Ordering::Release);
    }

    /// The limit in force.
    fn limit(&self) -> Option<Duration> {
        match self.limit_ms.load(Ordering::Acquire) {
            Self::NEVER => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }
}

/// A connection's socket as its reader reads it: a read returns data, the end of the stream,
/// or — only once the host has been silent past the [`Silence`] limit in force — a timeout.
/// A read in the middle of a PDU waits on like any other, so no PDU is cut by a tick.
#[derive(Debug)]
pub(super) struct PatientReader {
    stream: TcpStream,
    silence: Arc<Silence>,
    /// When the host last sent a byte (or the connection began).
    heard: Instant,
}

impl PatientReader {
    /// Reads `stream` under `silence`; the socket's own timeout becomes the tick (no longer
    /// than the shortest limit `silence` may hold, `shortest`).
    pub(super) fn new(
        stream: TcpStream,
        silence: Arc<Silence>,
        shortest: Duration,
    ) -> io::Result<Self> {
        let tick = TICK.min(shortest).max(Duration::from_millis(10));
        stream.set_read_timeout(Some(tick))?;
        Ok(Self {
            stream,
            silence,
            heard: Instant::now(),
        })
    }
}

impl Read for PatientReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.stream.read(buf) {
                Ok(n) => {
                    self.heard = Instant::now();
                    return Ok(n);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if self
                        .silence
                        .limit()
                        .is_some_and(|limit| self.heard.elapsed() >= limit)
                    {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "host silent past its timeout",
                        ));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn a_limit_lifted_while_a_read_waits_is_lifted_for_that_read() {
        let (mut client, server) = pair();
        let silence = Silence::new(Some(Duration::from_millis(100)));
        let mut reader =
            PatientReader::new(server, Arc::clone(&silence), Duration::from_millis(100)).unwrap();
        let waiting = std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            reader.read_exact(&mut byte).map(|()| byte[0])
        });
        // The read is waiting under the 100 ms limit; lift it, stay silent well past it.
        std::thread::sleep(Duration::from_millis(20));
        silence.set(None);
        std::thread::sleep(Duration::from_millis(400));
        client.write_all(&[7]).unwrap();
        assert_eq!(waiting.join().unwrap().unwrap(), 7);
    }

    #[test]
    fn silence_past_the_limit_in_force_ends_the_read() {
        let (_client, server) = pair();
        let silence = Silence::new(None);
        let mut reader =
            PatientReader::new(server, Arc::clone(&silence), Duration::from_millis(50)).unwrap();
        silence.set(Some(Duration::from_millis(150)));
        let started = Instant::now();
        let err = reader.read(&mut [0u8; 4]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(150));
    }
}
