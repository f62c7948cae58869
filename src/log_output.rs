//! Where log lines go: formatted on the thread that logs, queued (a lock-free
//! channel), and written out by a thread of their own, many lines per `write`, at
//! most every [`GATHER`]. A line wakes that thread only when it was asleep (nothing
//! queued since its last write): under load the threads that log make no system call
//! for a line and never wait for each other, and the writing thread wakes about a
//! hundred times a second (a queue read line by line would wake it for most lines and
//! make it spin between them). Nothing is dropped: past [`MAX_LINES`]
//! queued (standard error blocked), a thread that logs waits for room; at exit the
//! guard waits for what is queued, up to [`FLUSH_AT_EXIT`].

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

/// How long lines are gathered after a write, before the next one.
const GATHER: Duration = Duration::from_millis(10);
/// Lines queued past which a thread that logs waits (and the most written at once).
const MAX_LINES: usize = 64 * 1024;
/// The longest the writing thread sleeps: a bound on what a missed wake-up could
/// hold back (long in tests, so that a missed wake-up shows).
const PARK_AT_MOST: Duration = if cfg!(test) {
    Duration::from_secs(60)
} else {
    Duration::from_secs(1)
};
/// How long the guard waits, at exit, for what is queued to be written: standard
/// error may be blocked for good (a stuck log collector), and the process must end.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);
/// A batch buffer grown past this by a burst is given back after its write.
const KEEP_BATCH_BYTES: usize = 1024 * 1024;

/// What the threads that log and the writing thread share.
struct Shared {
    /// The writing thread is parked, or about to be: the next line unparks it.
    asleep: AtomicBool,
    /// The guard was dropped (or no writing thread could be started): lines go
    /// straight to standard error.
    stopped: AtomicBool,
    /// The writing thread, once started.
    thread: OnceLock<std::thread::Thread>,
}

impl Shared {
    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// The `MakeWriter` for tracing-subscriber: each event's line is queued whole.
#[derive(Clone)]
pub struct LogOutput {
    lines: Sender<Vec<u8>>,
    /// The queue's other end, also held here: the channel never disconnects, and
    /// once the writing thread has ended a thread that logs writes out what it finds.
    queued: Receiver<Vec<u8>>,
    shared: Arc<Shared>,
}

/// Writes what is queued when dropped (waiting at most [`FLUSH_AT_EXIT`]), and stops
/// the writing thread.
pub struct Flushed {
    shared: Arc<Shared>,
    ended: std::sync::mpsc::Receiver<()>,
}

/// Start the writing thread over `out` (standard error, for the gateway). Should no
/// thread be available, lines go to standard error one by one, as after the guard.
pub fn start(out: impl Write + Send + 'static) -> (LogOutput, Flushed) {
    let (lines, queued) = crossbeam_channel::bounded(MAX_LINES);
    let (end, ended) = std::sync::mpsc::channel::<()>();
    let shared = Arc::new(Shared {
        asleep: AtomicBool::new(false),
        stopped: AtomicBool::new(false),
        thread: OnceLock::new(),
    });
    let (writing, from) = (Arc::clone(&shared), queued.clone());
    let started = std::thread::Builder::new()
        .name("mediagate-log".into())
        .spawn(move || {
            write_out(&writing, &from, out);
            let _ = end.send(());
        });
    match started {
        Ok(thread) => {
            let _ = shared.thread.set(thread.thread().clone());
        }
        // `end` went with the closure: the guard does not wait.
        Err(_) => shared.stopped.store(true, Ordering::SeqCst),
    }
    (
        LogOutput {
            lines,
            queued,
            shared: Arc::clone(&shared),
        },
        Flushed { shared, ended },
    )
}

fn write_out(shared: &Shared, queued: &Receiver<Vec<u8>>, mut out: impl Write) {
    let mut batch = Vec::with_capacity(64 * 1024);
    loop {
        for line in queued.try_iter().take(MAX_LINES) {
            batch.extend_from_slice(&line);
        }
        if !batch.is_empty() {
            // Standard error gone (closed, full disk): the lines are lost, the
            // gateway goes on; there is nowhere to report it.
            let _ = out.write_all(&batch).and_then(|()| out.flush());
            batch.clear();
            if batch.capacity() > KEEP_BATCH_BYTES {
                batch = Vec::with_capacity(64 * 1024);
            }
            if !shared.stopped.load(Ordering::Acquire) {
                // More lines follow within moments: one write for all of them.
                std::thread::sleep(GATHER);
            }
            continue;
        }
        if shared.stopped.load(Ordering::SeqCst) {
            return; // stopped, and everything queued written
        }
        // Nothing queued: sleep until a line comes. The flag is raised before the
        // last look at the queue, so a line queued after that look unparks us (and
        // an unpark that comes before the park makes it return at once).
        shared.asleep.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if queued.is_empty() && !shared.stopped.load(Ordering::SeqCst) {
            std::thread::park_timeout(PARK_AT_MOST);
        }
        shared.asleep.store(false, Ordering::SeqCst);
    }
}

/// After the writing thread: what is still queued, straight to standard error.
fn write_rest(queued: &Receiver<Vec<u8>>) {
    let mut err = std::io::stderr().lock();
    for line in queued.try_iter() {
        let _ = err.write_all(&line);
    }
}

impl Drop for Flushed {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.wake();
        // Not a join: a writing thread stuck on a blocked standard error must not
        // keep the process from ending.
        let _ = self.ended.recv_timeout(FLUSH_AT_EXIT);
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogOutput {
    type Writer = &'a Self;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

impl Write for &LogOutput {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        if self.shared.stopped.load(Ordering::SeqCst) {
            // The process is ending: the writing thread may be gone. What is queued,
            // then this line, straight out.
            write_rest(&self.queued);
            return std::io::stderr().write(line);
        }
        // Blocks only while the queue is full. It cannot be disconnected (`self`
        // holds a receiver too); were it, the line would go straight out.
        if self.lines.send(line.to_vec()).is_err() {
            return std::io::stderr().write(line);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.shared.stopped.load(Ordering::SeqCst) {
            // Stopped meanwhile: the writing thread may have ended before this line.
            write_rest(&self.queued);
        } else if self.shared.asleep.swap(false, Ordering::SeqCst) {
            self.shared.wake();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An output the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let mut c = self.0.lock().unwrap();
            c.0.extend_from_slice(b);
            c.1 += 1;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().0.clone()).unwrap()
        }
        fn writes(&self) -> usize {
            self.0.lock().unwrap().1
        }
    }

    #[test]
    fn every_line_of_every_thread_arrives_whole_and_in_order() {
        let out = Captured::default();
        let (log, flushed) = start(out.clone());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for n in 0..5_000 {
                        (&log)
                            .write_all(format!("thread {t} line {n}\n").as_bytes())
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(flushed);
        let text = out.text();
        assert_eq!(text.lines().count(), 20_000);
        for t in 0..4 {
            let mine: Vec<_> = text
                .lines()
                .filter(|l| l.starts_with(&format!("thread {t} ")))
                .collect();
            let expected: Vec<_> = (0..5_000).map(|n| format!("thread {t} line {n}")).collect();
            assert_eq!(mine, expected, "thread {t}'s lines, whole and in order");
        }
        assert!(
            out.writes() < 1_000,
            "lines are written many at a time: {} writes",
            out.writes()
        );
    }

    #[test]
    fn a_line_is_written_soon_without_waiting_for_more() {
        let out = Captured::default();
        let (log, _flushed) = start(out.clone());
        // The writing thread asleep first: the line must wake it (it would sleep a
        // minute otherwise, past the deadline below).
        std::thread::sleep(Duration::from_millis(50));
        (&log).write_all(b"alone\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while out.text().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(out.text(), "alone\n");
    }

    #[test]
    fn a_blocked_output_holds_the_loggers_back_instead_of_dropping_lines() {
        /// An output that takes its time, as a pipe nobody reads would.
        #[derive(Clone, Default)]
        struct Slow(Captured);
        impl Write for Slow {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_millis(20));
                self.0.write(b)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = Slow::default();
        let (log, flushed) = start(out.clone());
        // More lines than the queue holds, faster than they are written.
        let lines = MAX_LINES * 3;
        for n in 0..lines {
            (&log).write_all(format!("{n}\n").as_bytes()).unwrap();
        }
        drop(flushed);
        let text = out.0.text();
        assert_eq!(text.lines().count(), lines);
        assert_eq!(text.lines().last(), Some((lines - 1).to_string().as_str()));
    }
}
