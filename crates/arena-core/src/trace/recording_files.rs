//! Which files recordings write to now, process-wide, so that a second recording to the same
//! file is refused before it truncates the first's (issue 26: two allocators recording to one
//! path both reported success over a torn file).
//!
//! A file is known by its device and inode (opened without truncating first), so two
//! spellings of one path, a hard link or a symbolic link are one file. A claim lasts as long as
//! the recording that holds it. Other processes and other copies of the library are kept out
//! by an exclusive advisory lock (`flock`) on the open file, which goes with its last handle.

use crate::types::error::{ArenaError, Result};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fs::File;

/// What identifies an open file: (device, inode).
type FileKey = (u64, u64);

/// Files claimed now → who records there.
static CLAIMED: Mutex<BTreeMap<FileKey, String>> = Mutex::new(BTreeMap::new());

/// A recording's hold on its file; dropping it lets the next recording have the file. None
/// for what is not a regular file (`/dev/null` takes any number of recordings).
#[derive(Debug)]
pub(crate) struct FileClaim {
    key: Option<FileKey>,
}

impl Drop for FileClaim {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            CLAIMED.lock().remove(&key);
        }
    }
}

/// The file's identity, or None for what is not a regular file.
fn key_of(file: &File) -> std::io::Result<Option<FileKey>> {
    let m = file.metadata()?;
    if !m.is_file() {
        return Ok(None);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Ok(Some((m.dev(), m.ino())))
    }
    #[cfg(not(unix))]
    {
        Ok(None)
    }
}

/// Opens `path` for writing, created if missing, not truncated, without waiting: opening a
/// FIFO that no process reads waits for a reader in `open(2)`, which froze the caller (Node's
/// event loop at `startRecording`) with no way out. Such a FIFO is refused at once (`ENXIO`,
/// told in words); once open, writes wait as they always did (a recording keeps every event).
fn open_without_waiting(path: &str) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ENXIO) && is_fifo(path) {
            return std::io::Error::new(
                e.kind(),
                "it is a FIFO that no process has open for reading (start the reader first)",
            );
        }
        e
    })?;
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: `fd` is the open descriptor `file` owns for this whole block; F_GETFL and
        // F_SETFL read and set its status flags and touch no memory.
        #[allow(unsafe_code)]
        let cleared = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        if !cleared {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(file)
}

/// Whether `path` names a FIFO (`ENXIO` is also what opening a socket gives).
#[cfg(unix)]
fn is_fifo(path: &str) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// Opens `path` for `who`'s recording, empty: refused (`ERR_ARENA_INVALID_ARGUMENT`, naming the
/// path and who records there) while another recording of this process writes to the same
/// file, which is then left as it is.
pub(crate) fn open_for_recording(path: &str, who: &str) -> Result<(File, FileClaim)> {
    let shown = crate::types::error::escaped(path);
    let cannot =
        |e: std::io::Error| ArenaError::invalid_argument(format!("cannot record to {shown}: {e}"));
    // Not truncated yet: a file another recording writes must stay whole.
    let file = open_without_waiting(path).map_err(cannot)?;
    let Some(key) = key_of(&file).map_err(cannot)? else {
        // A device or a pipe: nothing to truncate, nothing to tear.
        return Ok((file, FileClaim { key: None }));
    };
    {
        let mut claimed = CLAIMED.lock();
        if let Some(holder) = claimed.get(&key) {
            return Err(ArenaError::invalid_argument(format!(
                "cannot record to {shown}: {holder} records to that file now; stop that \
                 recording first or choose another path"
            )));
        }
        claimed.insert(key, who.to_string());
    }
    let claim = FileClaim { key: Some(key) };
    // Across processes (a cluster's workers given one path) and copies of the library in one
    // process (each has its own `CLAIMED`): an advisory lock on the open file, held while it
    // is open. A file system without locks (ENOLCK) records unguarded, as before.
    if let Err(std::fs::TryLockError::WouldBlock) = file.try_lock() {
        return Err(ArenaError::invalid_argument(format!(
            "cannot record to {shown}: another process, or another copy of cuda-arena in this \
             one, records to that file now (it holds the file's lock); stop that recording \
             first or choose another path"
        )));
    }
    file.set_len(0).map_err(cannot)?;
    Ok((file, claim))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("cuda-arena-claims-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_file_claimed_by_one_recording_is_refused_to_another_under_any_spelling_and_kept_whole() {
        let path = temp("spelled");
        std::fs::write(&path, "").expect("file");
        let (mut first, claim) =
            open_for_recording(path.to_str().expect("utf-8"), "the Cuda:0 allocator")
                .expect("first");
        std::io::Write::write_all(&mut first, b"kept\n").expect("write");
        let dir = path.parent().expect("dir");
        let other = format!(
            "{}/./{}",
            dir.display(),
            path.file_name().expect("name").to_string_lossy()
        );
        let e = open_for_recording(&other, "the Cpu allocator").expect_err("refused");
        assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
        assert!(e.to_string().contains("the Cuda:0 allocator"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "kept\n",
            "not truncated"
        );
        // What a recording's end does: the file closed (its lock with it), then the claim.
        drop(first);
        drop(claim);
        let (_f, _again) =
            open_for_recording(&other, "the Cpu allocator").expect("free once released");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "",
            "truncated for the new one"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_file_locked_by_another_process_or_copy_is_refused_and_kept_whole() {
        let path = temp("locked");
        std::fs::write(&path, "theirs\n").expect("file");
        // Another open file description holding the lock: what another process, or another
        // copy of the library in this one, holds while it records there.
        let other = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        other.try_lock().expect("lock");
        let e = open_for_recording(path.to_str().expect("utf-8"), "one").expect_err("refused");
        assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
        assert!(e.to_string().contains("another process"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "theirs\n");
        drop(other);
        let (_f, _claim) = open_for_recording(path.to_str().expect("utf-8"), "one")
            .expect("free once their file is closed");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "");
        let _ = std::fs::remove_file(&path);
    }

    #[cfg(unix)]
    #[test]
    fn devices_take_any_number_of_recordings() {
        let (_a, _ca) = open_for_recording("/dev/null", "one").expect("first");
        let (_b, _cb) = open_for_recording("/dev/null", "two").expect("second");
    }

    #[test]
    fn a_symbolic_link_to_a_claimed_file_is_the_same_file() {
        let path = temp("target");
        let link = temp("link");
        let _ = std::fs::remove_file(&link);
        let (_f, _claim) = open_for_recording(path.to_str().expect("utf-8"), "one").expect("first");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(open_for_recording(link.to_str().expect("utf-8"), "two").is_err());
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_file(&path);
    }

    #[cfg(unix)]
    fn fifo(name: &str) -> std::path::PathBuf {
        let path = temp(name);
        let _ = std::fs::remove_file(&path);
        let c = std::ffi::CString::new(path.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        #[allow(unsafe_code)]
        let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(made, 0, "mkfifo");
        path
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_no_process_reads_is_refused_at_once_naming_why() {
        let path = fifo("unread");
        // Before, this open waited for a reader forever: on a thread of its own, so that the
        // test fails instead of hanging (a minute is a guard against the hang, not a timing).
        let (tx, rx) = std::sync::mpsc::channel();
        let at = path.to_str().expect("utf-8").to_string();
        std::thread::spawn(move || {
            let _ = tx.send(open_for_recording(&at, "one").map(|_| ()));
        });
        let e = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the open returned instead of waiting for a reader")
            .expect_err("refused");
        assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
        assert!(
            e.to_string().contains("no process has open for reading"),
            "{e}"
        );
        let _ = std::fs::remove_file(&path);
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_with_a_reader_takes_the_recording_and_its_writes_wait_as_before() {
        use std::io::{Read, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let path = fifo("read");
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .expect("reader");
        let (mut w, _claim) =
            open_for_recording(path.to_str().expect("utf-8"), "one").expect("a reader is there");
        // SAFETY: F_GETFL on the descriptor `w` owns reads its flags only.
        #[allow(unsafe_code)]
        let flags = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&w), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0, "writes block again once open");
        w.write_all(b"line\n").expect("write");
        drop(w);
        let mut got = String::new();
        reader.read_to_string(&mut got).expect("read");
        assert_eq!(got, "line\n");
        let _ = std::fs::remove_file(&path);
    }

    #[cfg(unix)]
    #[test]
    fn a_socket_is_refused_with_the_systems_reason_not_called_a_fifo() {
        let path = temp("socket");
        let _ = std::fs::remove_file(&path);
        let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let e = open_for_recording(path.to_str().expect("utf-8"), "one").expect_err("refused");
        assert_eq!(e.code(), "ERR_ARENA_INVALID_ARGUMENT");
        assert!(!e.to_string().contains("FIFO"), "{e}");
        let _ = std::fs::remove_file(&path);
    }
}
