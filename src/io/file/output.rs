//! File outputs: regular files (synced and truncated back on resume) and streams (stdout,
//! `/dev/null`, pipes), with the closed-reader case (EPIPE) that ends a run quietly.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use super::PipelineError;
use crate::state::OutputMark;

pub(super) struct Output {
    pub(super) path: String,
    pub(super) writer: Box<dyn Write>,
    /// The file to sync at checkpoints: regular files only (`/dev/null`, pipes and terminals
    /// cannot be synced, truncated or resumed).
    pub(super) file: Option<File>,
    pub(super) written: u64,
    /// The reader went away (EPIPE): nothing more is written or flushed.
    pub(super) closed: bool,
}

/// Whether an output path names an existing device, pipe or socket (`/dev/null`, a fifo) rather
/// than a regular file: such outputs may be shared by several outputs and are never synced.
pub fn is_stream(path: &str) -> bool {
    path != "-" && std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// A write to an output whose reader went away (`| head -1`): the run stops quietly.
pub(super) fn is_closed(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

impl Output {
    pub(super) fn open(path: &str, resume_len: Option<u64>) -> Result<Output, PipelineError> {
        if path == "-" {
            let writer: Box<dyn Write> =
                Box::new(BufWriter::with_capacity(1 << 20, std::io::stdout()));
            return Ok(Output {
                path: path.into(),
                writer,
                file: None,
                written: 0,
                closed: false,
            });
        }
        let io = |what, source| PipelineError::Io {
            what,
            path: path.to_string(),
            source,
        };
        if is_stream(path) {
            // A device or a pipe: written as a stream, never truncated, synced or resumed.
            let file = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| io("cannot open output", e))?;
            return Ok(Output {
                path: path.into(),
                writer: Box::new(BufWriter::with_capacity(1 << 20, file)),
                file: None,
                written: 0,
                closed: false,
            });
        }
        if let Some(parent) = Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(|e| io("cannot create directory for", e))?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(resume_len.is_none())
            .open(path)
            .map_err(|e| io("cannot open output", e))?;
        let written = resume_len.unwrap_or(0);
        if let Some(len) = resume_len {
            // Drop whatever was written after the checkpoint; it is re-emitted identically.
            file.set_len(len)
                .map_err(|e| io("cannot truncate output", e))?;
            file.seek(SeekFrom::Start(len))
                .map_err(|e| io("cannot seek output", e))?;
        }
        let clone = file.try_clone().map_err(|e| io("cannot open output", e))?;
        Ok(Output {
            path: path.into(),
            writer: Box::new(BufWriter::with_capacity(1 << 20, file)),
            file: Some(clone),
            written,
            closed: false,
        })
    }

    /// Writes one record; `Ok(false)` when the output's reader has gone away.
    pub(super) fn write_record(&mut self, rec: &[u8]) -> Result<bool, PipelineError> {
        if self.closed {
            return Ok(false);
        }
        let r = self
            .writer
            .write_all(rec)
            .and_then(|_| self.writer.write_all(b"\n"));
        match r {
            Ok(()) => {}
            Err(e) if is_closed(&e) => {
                self.closed = true;
                return Ok(false);
            }
            Err(source) => {
                return Err(PipelineError::Io {
                    what: "cannot write",
                    path: self.path.clone(),
                    source,
                })
            }
        }
        self.written += rec.len() as u64 + 1;
        Ok(true)
    }

    pub(super) fn sync(&mut self) -> Result<OutputMark, PipelineError> {
        let err = |source| PipelineError::Io {
            what: "cannot flush",
            path: self.path.clone(),
            source,
        };
        if !self.closed {
            match self.writer.flush() {
                Ok(()) => {}
                Err(e) if is_closed(&e) => self.closed = true,
                Err(e) => return Err(err(e)),
            }
        }
        if let Some(f) = &self.file {
            f.sync_data().map_err(err)?;
        }
        Ok(OutputMark {
            path: self.path.clone(),
            len: self.written,
        })
    }
}
