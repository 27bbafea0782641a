//! `--token-auth-file`: upstream's static token CSV, one user per line:
//! `token,user,uid,"group1,group2"` (groups optional; quoted when there are several).
//!
//! Invariants: a line with fewer than three columns, or an empty token or user, is an error
//! at load (the server refuses to start, as upstream); a token appearing twice keeps its
//! last line and is logged.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::authn::{TokenAnswer, TokenAuthenticator};
use crate::user::UserInfo;

/// Why a token file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file could not be read.
    #[error("reading token file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("token file {path}, line {line}: {message}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
}

/// The static tokens.
#[derive(Default)]
pub struct TokenFile {
    tokens: HashMap<String, Arc<UserInfo>, foldhash::fast::RandomState>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFile")
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

impl TokenFile {
    /// Loads a token file.
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let data = std::fs::read(path).map_err(|source| TokenFileError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data, &path.display().to_string())
    }

    /// Parses token file contents (`name` appears in errors).
    pub fn parse(data: &[u8], name: &str) -> Result<Self, TokenFileError> {
        let data = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .comment(None)
            .from_reader(data);
        let mut tokens = HashMap::default();
        for rec in reader.records() {
            let line_err = |line: u64, message: String| TokenFileError::Line {
                path: name.to_owned(),
                line,
                message,
            };
            let rec = rec.map_err(|e| {
                let line = e.position().map_or(0, |p| p.line());
                line_err(line, e.to_string())
            })?;
            let line = rec.position().map_or(0, |p| p.line());
            if rec.len() == 1 && rec.get(0).is_some_and(|f| f.trim().is_empty()) {
                continue;
            }
            if rec.len() < 3 {
                return Err(line_err(
                    line,
                    format!(
                        "must have at least 3 columns (token, user name, user uid), found {}",
                        rec.len()
                    ),
                ));
            }
            let field = |i: usize| rec.get(i).unwrap_or("").trim();
            let (token, user, uid) = (field(0), field(1), field(2));
            if token.is_empty() || user.is_empty() {
                return Err(line_err(line, "empty token or user name".into()));
            }
            let groups = if rec.len() >= 4 {
                field(3)
                    .split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned)
                    .collect()
            } else {
                Vec::new()
            };
            let info = UserInfo {
                name: user.to_owned(),
                uid: uid.to_owned(),
                groups,
                extra: Default::default(),
            };
            let info = Arc::new(info.with_authenticated_group());
            if tokens.insert(token.to_owned(), info).is_some() {
                tracing::warn!(file = name, line, "duplicate token: the later line wins");
            }
        }
        Ok(Self { tokens })
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

impl TokenAuthenticator for TokenFile {
    fn authenticate_token(&self, token: &str) -> TokenAnswer<'_> {
        TokenAnswer::Now(Ok(self.tokens.get(token).cloned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(f: &TokenFile, token: &str) -> crate::authn::TokenResult {
        match f.authenticate_token(token) {
            TokenAnswer::Now(r) => r,
            TokenAnswer::Later(_) => panic!("the token file answers from memory"),
        }
    }

    #[test]
    fn upstream_format() {
        let f = TokenFile::parse(
            b"\xef\xbb\xbfabc,alice,u1,\"dev,ops\"\n\ndef, bob ,u2\nghi,carol,u3,single\n",
            "t.csv",
        )
        .unwrap();
        assert_eq!(f.len(), 3);
        let alice = ask(&f, "abc").unwrap().unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.uid, "u1");
        assert_eq!(alice.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(ask(&f, "def").unwrap().unwrap().name, "bob");
        assert_eq!(
            ask(&f, "ghi").unwrap().unwrap().groups,
            ["single", "system:authenticated"]
        );
        assert_eq!(ask(&f, "nope").unwrap(), None);
    }

    #[test]
    fn malformed_lines_are_refused() {
        let e = TokenFile::parse(b"abc,alice,u1\nshort,x\n", "t.csv").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(TokenFile::parse(b",alice,u1\n", "t.csv").is_err());
        assert!(
            TokenFile::parse(b"abc,\xff\xfe,u1\n", "t.csv").is_err(),
            "not UTF-8"
        );
        assert!(TokenFile::parse("tök,émile,ü\n".as_bytes(), "t.csv").is_ok());
    }
}
