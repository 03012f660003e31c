//! The stack crate's error enum: I/O, bytes from the network that do not
//! parse (protocol), a server that answered with an error, bad flags, and
//! an interrupt.

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Bytes from a socket that do not parse as what was expected.
    #[error("{0}")]
    Protocol(String),
    /// A server answered, but with an error.
    #[error("{0}")]
    Server(String),
    /// Flags or configuration that cannot work.
    #[error("{0}")]
    BadInput(String),
    /// The server refused the credentials (HTTP 401/403): another host of
    /// the group would refuse them too, so nothing is retried.
    #[error("{0}")]
    Refused(String),
    #[error("interrupted")]
    Interrupted,
}

impl StackError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StackError {
        let what = what.into();
        move |source| StackError::Io { what, source }
    }
}

pub type Result<T> = std::result::Result<T, StackError>;
