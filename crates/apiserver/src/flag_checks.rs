//! The checks that span several flags, run once they are parsed: the storage choice
//! (`--etcd-servers` alone selects etcd, as upstream, where etcd is the only store), the
//! contradicting combinations (refused, naming both flags, rather than one of them being
//! silently ignored), and `--bind-address`/`--secure-port` folded into `--bind`.
//!
//! Invariants: after [`Options::settle`] succeeded, [`Options::storage`] is `Some`, every
//! flag given configures the backend in use (no embedded-store flag with etcd, no etcd flag
//! with the embedded store), and [`Options::bind`] is the address to listen on.
//! [`Options::parse_checked`] sees which flags were given on the command line (defaults
//! included); options built otherwise are checked by what their optional fields hold.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::{Backend, Options};

/// The etcd client URL used with `--storage etcd` and no `--etcd-servers` (upstream has no
/// default; etcd's own default client URL).
pub const DEFAULT_ETCD_SERVER: &str = "http://127.0.0.1:2379";

/// The port of `--bind-address` without `--secure-port` (the default `--bind`'s).
pub const DEFAULT_PORT: u16 = 8080;

/// Flags that configure etcd only: `(clap id, flag)`.
const ETCD_ONLY: &[(&str, &str)] = &[
    ("etcd_prefix", "--etcd-prefix"),
    ("etcd_cafile", "--etcd-cafile"),
    ("etcd_certfile", "--etcd-certfile"),
    ("etcd_keyfile", "--etcd-keyfile"),
    ("etcd_compaction_interval", "--etcd-compaction-interval"),
    ("etcd_max_request_bytes", "--etcd-max-request-bytes"),
];

/// Flags that configure the embedded store only: `(clap id, flag)`.
const EMBEDDED_ONLY: &[(&str, &str)] = &[
    ("data_dir", "--data-dir"),
    ("embedded_retain_revisions", "--embedded-retain-revisions"),
    ("embedded_retain_window", "--embedded-retain-window"),
    ("embedded_retain_bytes", "--embedded-retain-bytes"),
    ("embedded_max_object_bytes", "--embedded-max-object-bytes"),
    ("embedded_quota_bytes", "--embedded-quota-bytes"),
];

/// Two flags that contradict each other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{first} contradicts {second}: {why}")]
pub struct FlagConflict {
    /// The flag that does not apply.
    pub first: String,
    /// What it contradicts (a flag, or the default it falls to).
    pub second: String,
    /// Why, and what to do.
    pub why: String,
}

impl Options {
    /// Parses the process's arguments and [settles](Self::settle) them; on an error prints
    /// it and exits with code 2, as clap does for any usage error.
    pub fn parse_checked() -> Self {
        Self::try_parse_checked_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// [`Parser::try_parse_from`](clap::Parser::try_parse_from), then
    /// [`settle`](Self::settle) knowing which flags the command line gave; a conflict is
    /// a usage error ([`clap::error::ErrorKind::ArgumentConflict`]).
    pub fn try_parse_checked_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut cmd = Self::command();
        let matches = cmd.try_get_matches_from_mut(args)?;
        let mut opts = Self::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
        opts.settle_with(&|id| given_in(&matches, id))
            .map_err(|e| cmd.error(clap::error::ErrorKind::ArgumentConflict, e))?;
        Ok(opts)
    }

    /// Settles the storage choice and refuses contradicting flags (see the module doc),
    /// judging which flags were given by the optional fields only (what a caller of
    /// `parse_from` has); idempotent.
    pub fn settle(&mut self) -> Result<(), FlagConflict> {
        self.settle_with(&|_| false)
    }

    /// The storage backend in use: `--storage`, else etcd when `--etcd-servers` is given,
    /// else the embedded store.
    pub fn backend(&self) -> Backend {
        match self.storage {
            Some(b) => b,
            None if !self.etcd_servers.is_empty() => Backend::Etcd,
            None => Backend::Embedded,
        }
    }

    /// The storage in words, for the start lines: `embedded (durable, DIR)`, `embedded (in
    /// memory: lost on exit)`, `etcd (URL,URL)`.
    pub fn storage_description(&self) -> String {
        match (self.backend(), &self.data_dir) {
            (Backend::Etcd, _) => format!("etcd ({})", self.etcd_endpoints().join(",")),
            (Backend::Embedded, Some(dir)) => format!("embedded (durable, {})", dir.display()),
            (Backend::Embedded, None) => "embedded (in memory: lost on exit)".to_owned(),
        }
    }

    /// The etcd client URLs: `--etcd-servers`, or [`DEFAULT_ETCD_SERVER`].
    pub fn etcd_endpoints(&self) -> Vec<String> {
        if self.etcd_servers.is_empty() {
            vec![DEFAULT_ETCD_SERVER.to_owned()]
        } else {
            self.etcd_servers.clone()
        }
    }

    /// `given(id)`: whether the flag of clap id `id` was given (beyond what the optional
    /// fields show).
    fn settle_with(&mut self, given: &dyn Fn(&str) -> bool) -> Result<(), FlagConflict> {
        let given = |id: &str| given(id) || self.optional_is_set(id);
        let backend = self.backend();
        let chooser = match (self.storage, backend) {
            (Some(Backend::Etcd), _) => "--storage etcd",
            (Some(Backend::Embedded), _) => "--storage embedded",
            (None, Backend::Etcd) => "--etcd-servers",
            (None, Backend::Embedded) => {
                "the default embedded store (no --etcd-servers, no --storage etcd)"
            }
        };
        if self.storage == Some(Backend::Embedded) && !self.etcd_servers.is_empty() {
            return Err(FlagConflict {
                first: "--etcd-servers".into(),
                second: chooser.into(),
                why: "--etcd-servers stores objects in etcd, --storage embedded in this \
                      process; drop one (--etcd-servers alone selects etcd)"
                    .into(),
            });
        }
        match backend {
            Backend::Etcd => {
                if let Some((_, flag)) = EMBEDDED_ONLY.iter().find(|(id, _)| given(id)) {
                    let why = if *flag == "--data-dir" {
                        "--data-dir is where the embedded store keeps its data, and etcd keeps \
                         it instead; drop --data-dir, or drop the etcd flags to use the \
                         embedded store"
                    } else {
                        "it configures the embedded store, which etcd replaces; drop it"
                    };
                    return Err(FlagConflict {
                        first: (*flag).into(),
                        second: chooser.into(),
                        why: why.into(),
                    });
                }
            }
            Backend::Embedded => {
                if let Some((_, flag)) = ETCD_ONLY.iter().find(|(id, _)| given(id)) {
                    return Err(FlagConflict {
                        first: (*flag).into(),
                        second: chooser.into(),
                        why: "it configures etcd, and the embedded store is in use; give \
                              --etcd-servers to store in etcd, or drop it"
                            .into(),
                    });
                }
            }
        }
        self.storage = Some(backend);
        if self.bind_address.is_some() || self.secure_port.is_some() {
            let ip = self.bind_address.unwrap_or(IpAddr::from([127, 0, 0, 1]));
            self.bind = SocketAddr::new(ip, self.secure_port.unwrap_or(DEFAULT_PORT));
        }
        Ok(())
    }

    /// Whether an optional field of clap id `id` holds a value.
    fn optional_is_set(&self, id: &str) -> bool {
        match id {
            "etcd_cafile" => self.etcd_cafile.is_some(),
            "etcd_certfile" => self.etcd_certfile.is_some(),
            "etcd_keyfile" => self.etcd_keyfile.is_some(),
            "data_dir" => self.data_dir.is_some(),
            "embedded_retain_bytes" => self.embedded_retain_bytes.is_some(),
            "embedded_quota_bytes" => self.embedded_quota_bytes.is_some(),
            _ => false,
        }
    }
}

/// Whether the command line (or the environment) gave the flag of clap id `id`.
fn given_in(matches: &ArgMatches, id: &str) -> bool {
    matches.try_contains_id(id).is_ok_and(|present| present)
        && matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::try_parse_checked_from(
            std::iter::once("listwatch-apiserver").chain(args.iter().copied()),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn etcd_servers_select_etcd_and_contradictions_are_refused() {
        let o = parse(&["--etcd-servers", "http://e:2379"]).unwrap();
        assert_eq!(o.storage, Some(Backend::Etcd));
        assert_eq!(o.etcd_endpoints(), ["http://e:2379"]);
        let o = parse(&[]).unwrap();
        assert_eq!(o.storage, Some(Backend::Embedded));
        let o = parse(&["--storage", "etcd"]).unwrap();
        assert_eq!(o.etcd_endpoints(), [DEFAULT_ETCD_SERVER]);
        for (args, a, b) in [
            (
                &["--storage", "embedded", "--etcd-servers", "http://e:1"][..],
                "--etcd-servers",
                "--storage embedded",
            ),
            (
                &["--storage", "etcd", "--data-dir", "/d"],
                "--data-dir",
                "--storage etcd",
            ),
            (
                &["--etcd-servers", "http://e:1", "--data-dir", "/d"],
                "--data-dir",
                "--etcd-servers",
            ),
            (
                &[
                    "--etcd-servers",
                    "http://e:1",
                    "--embedded-retain-window",
                    "5m",
                ],
                "--embedded-retain-window",
                "--etcd-servers",
            ),
            (
                &["--etcd-cafile", "/ca"],
                "--etcd-cafile",
                "the default embedded store",
            ),
            (
                &["--etcd-prefix", "/registry"],
                "--etcd-prefix",
                "the default embedded store",
            ),
            (
                &["--storage", "embedded", "--etcd-compaction-interval", "0"],
                "--etcd-compaction-interval",
                "--storage embedded",
            ),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(a) && e.contains(b), "{args:?}: {e}");
        }
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value_and_lists_add_up() {
        let o = parse(&[
            "--bind",
            "127.0.0.1:1",
            "--bind",
            "127.0.0.1:2",
            "--watch-cache",
            "--watch-cache=false",
        ])
        .unwrap();
        assert_eq!(o.bind, "127.0.0.1:2".parse().unwrap());
        assert!(!o.watch_cache);
        let o = parse(&[
            "--service-account-issuer",
            "https://a",
            "--service-account-issuer",
            "https://b",
            "--etcd-servers",
            "http://e:1",
            "--etcd-servers",
            "http://e:2,http://e:3",
        ])
        .unwrap();
        assert_eq!(
            o.security.service_account_issuer,
            ["https://a", "https://b"]
        );
        assert_eq!(o.etcd_servers, ["http://e:1", "http://e:2", "http://e:3"]);
    }

    #[test]
    fn bind_address_and_secure_port_make_the_bind_address() {
        let o = parse(&["--secure-port", "0"]).unwrap();
        assert_eq!(o.bind, "127.0.0.1:0".parse().unwrap());
        let o = parse(&["--bind-address", "localhost", "--secure-port", "9"]).unwrap();
        assert_eq!(o.bind, "127.0.0.1:9".parse().unwrap());
        assert!(parse(&["--bind", "127.0.0.1:1", "--secure-port", "2"]).is_err());
    }
}
