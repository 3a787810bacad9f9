//! The input side of the file pipeline: a file read from a checkpointed offset, or stdin read
//! on a thread so that a signal acts while the pipeline waits for a line.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::PipelineError;
use crate::state::RunRecord;

pub(super) struct Input {
    pub(super) source: Source,
    pub(super) offset: u64,
    pub(super) len: Option<u64>,
}

pub(super) enum Source {
    File(Box<dyn BufRead>),
    /// stdin is read on its own thread, so a signal acts while no line arrives.
    Stdin {
        lines: std::sync::mpsc::Receiver<std::io::Result<Vec<Vec<u8>>>>,
        batch: std::vec::IntoIter<Vec<u8>>,
    },
}

/// What the next read gave.
pub(super) enum Read {
    /// A line of this many bytes (newline included) is in the buffer.
    Line(usize),
    /// The input ended.
    End,
    /// `stop` was set while waiting for stdin.
    Stopped,
}

impl Input {
    pub(super) fn next_line(
        &mut self,
        line: &mut Vec<u8>,
        stop: &AtomicBool,
    ) -> std::io::Result<Read> {
        line.clear();
        match &mut self.source {
            Source::File(r) => {
                let n = r.read_until(b'\n', line)?;
                Ok(if n == 0 { Read::End } else { Read::Line(n) })
            }
            Source::Stdin { lines, batch } => loop {
                if let Some(l) = batch.next() {
                    *line = l;
                    return Ok(Read::Line(line.len()));
                }
                match lines.recv_timeout(Duration::from_millis(100)) {
                    Ok(Ok(b)) if b.is_empty() => return Ok(Read::End),
                    Ok(Ok(b)) => *batch = b.into_iter(),
                    Ok(Err(e)) => return Err(e),
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(Read::End),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(Read::Stopped);
                        }
                    }
                }
            },
        }
    }
}

/// Reads stdin on a thread, in batches of lines (a batch is sent as soon as no more input is
/// buffered, so a slow producer's lines are not held back); an empty batch means end of input.
pub(super) fn stdin_lines() -> std::sync::mpsc::Receiver<std::io::Result<Vec<Vec<u8>>>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(64);
    std::thread::spawn(move || {
        let mut reader = BufReader::with_capacity(1 << 20, std::io::stdin().lock());
        loop {
            let mut batch = Vec::new();
            let mut ended = false;
            loop {
                let mut line = Vec::new();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(_) => batch.push(line),
                    Err(e) => {
                        let _ = tx.send(Ok(batch));
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
                if batch.len() >= 256 || reader.buffer().is_empty() {
                    break;
                }
            }
            if !batch.is_empty() && tx.send(Ok(batch)).is_err() {
                return;
            }
            if ended {
                let _ = tx.send(Ok(Vec::new()));
                return;
            }
        }
    });
    rx
}

pub(super) fn open_input(
    path: &str,
    resume: Option<&RunRecord>,
    stop: &AtomicBool,
) -> Result<(Input, u64), PipelineError> {
    let io = |what, source| PipelineError::Io {
        what,
        path: path.to_string(),
        source,
    };
    if path == "-" {
        let mut input = Input {
            source: Source::Stdin {
                lines: stdin_lines(),
                batch: Vec::new().into_iter(),
            },
            offset: resume.map_or(0, |r| r.input_offset),
            len: None,
        };
        let mut skipped = 0;
        if let Some(run) = resume {
            // stdin cannot seek: skip the records the checkpoint already covers.
            let mut buf = Vec::new();
            while skipped < run.records {
                match input
                    .next_line(&mut buf, stop)
                    .map_err(|e| io("cannot read", e))?
                {
                    Read::Line(_) => skipped += 1,
                    Read::End | Read::Stopped => break,
                }
            }
        }
        return Ok((input, skipped));
    }
    let mut file = File::open(path).map_err(|e| io("cannot open input", e))?;
    let len = file.metadata().map(|m| m.len()).ok();
    let offset = resume.map_or(0, |r| r.input_offset);
    if offset > 0 {
        if len.is_some_and(|l| l < offset) {
            return Err(PipelineError::Config(format!(
                "input {path} is shorter ({} bytes) than the checkpoint of the interrupted run ({offset} bytes); pass --no-resume to start over",
                len.unwrap_or(0)
            )));
        }
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io("cannot seek input", e))?;
    }
    let skipped = resume.map_or(0, |r| r.records);
    Ok((
        Input {
            source: Source::File(Box::new(BufReader::with_capacity(1 << 20, file))),
            offset,
            len,
        },
        skipped,
    ))
}
