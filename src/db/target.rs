//! Where the data lives: `database.url` parsed into a backend and its address, shown
//! without a PostgreSQL password.

use std::fmt;
use std::path::PathBuf;

/// Where the data lives, parsed from `database.url`.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    /// `sqlite://PATH`: the text after `sqlite://` is the file path (relative or absolute).
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`, handed to libpq as written.
    Postgres(String),
}

impl DatabaseTarget {
    /// Parses a database URL. Anything but the two known schemes is an error: a typo must
    /// never silently create an empty SQLite file somewhere.
    pub fn parse(url: &str) -> Result<Self, String> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() || path.starts_with(':') {
                return Err(format!(
                    "'{url}' names no SQLite file (write sqlite://data/inlet.db or sqlite:///abs/path.db)"
                ));
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url.to_owned()));
        }
        let scheme = url.split(':').next().unwrap_or_default();
        Err(format!(
            "unsupported database URL scheme '{scheme}' (expected sqlite:// or postgres://)"
        ))
    }

    pub fn backend_name(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
        }
    }
}

/// Shows the target without a PostgreSQL password.
impl fmt::Debug for DatabaseTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            Self::Postgres(url) => {
                let redacted = match (url.find("://"), url.rfind('@')) {
                    (Some(start), Some(at)) if at > start => {
                        let credentials = &url[start + 3..at];
                        match credentials.split_once(':') {
                            Some((user, _)) => {
                                format!("{}{user}:***{}", &url[..start + 3], &url[at..])
                            }
                            None => url.clone(),
                        }
                    }
                    _ => url.clone(),
                };
                f.write_str(&redacted)
            }
        }
    }
}

impl fmt::Display for DatabaseTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_the_backend_or_fail() {
        assert_eq!(
            DatabaseTarget::parse("sqlite://data/inlet.db").unwrap(),
            DatabaseTarget::Sqlite(PathBuf::from("data/inlet.db"))
        );
        assert_eq!(
            DatabaseTarget::parse("sqlite:///var/lib/inlet/inlet.db").unwrap(),
            DatabaseTarget::Sqlite(PathBuf::from("/var/lib/inlet/inlet.db"))
        );
        assert!(matches!(
            DatabaseTarget::parse("postgresql://u@h/db").unwrap(),
            DatabaseTarget::Postgres(_)
        ));
        for bad in [
            "sqlite:data.db",
            "sqlite://",
            "sqlite://:memory:",
            "sqllite://x.db",
            "data.db",
            "mysql://x",
        ] {
            assert!(DatabaseTarget::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn postgres_passwords_do_not_print() {
        let target = DatabaseTarget::parse("postgres://inlet:hunter2@db:5432/inlet").unwrap();
        let shown = target.to_string();
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("inlet:***@db"), "{shown}");
    }
}
