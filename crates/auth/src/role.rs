//! Roles. `admin` includes `write` and `read`; `write` and `read` are
//! separate, so a feed handler's credentials cannot read the data and a
//! dashboard's cannot write.

use crate::AuthError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Queries: SQL over HTTP, PostgreSQL wire and kdb+ IPC, `/status`,
    /// subscriptions.
    Read,
    /// Ingest: ILP over TCP and HTTP, `Write` frames, `.u.upd`.
    Write,
    /// Operations that change or drop state: clear, journal trim,
    /// checkpoint, promote, switchover, drain, end of day, schema changes.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Read, Role::Write, Role::Admin];

    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Result<Role, AuthError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            "admin" => Ok(Role::Admin),
            other => Err(AuthError::UnknownRole(other.to_string())),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether holding `held` allows what `needed` guards.
pub fn allows(held: &[Role], needed: Role) -> bool {
    held.iter().any(|&r| r == needed || r == Role::Admin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_allows_everything_and_read_write_are_apart() {
        assert!(allows(&[Role::Admin], Role::Read));
        assert!(allows(&[Role::Admin], Role::Write));
        assert!(!allows(&[Role::Write], Role::Read));
        assert!(!allows(&[Role::Read], Role::Write));
        assert!(!allows(&[Role::Read, Role::Write], Role::Admin));
        assert_eq!(Role::parse(" Admin ").ok(), Some(Role::Admin));
        assert!(Role::parse("root").is_err());
    }
}
