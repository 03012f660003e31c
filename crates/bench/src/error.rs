//! The bench crate's error enum.

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Server(String),
    #[error("{0}")]
    Protocol(String),
    #[error("interrupted (Ctrl-C): every child process was stopped")]
    Interrupted,
}

impl BenchError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
        let what = what.into();
        move |source| BenchError::Io { what, source }
    }
}

pub type Result<T> = std::result::Result<T, BenchError>;
