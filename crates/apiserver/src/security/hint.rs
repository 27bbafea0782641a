//! What the server tells a person at start ([`start_hint`]): a command that works against
//! it as configured, and what the server does with credentials.
//!
//! Invariant: the hint is true for every configuration — it says the server does not
//! authenticate only when no authenticator is configured (every client is then a cluster
//! administrator), names the credentials an authenticating server accepts, and with
//! `--pki-dir` is the generated kubeconfig, which carries the CA and the admin certificate.
//! kubectl (client-go's `clientcmd`) sends credentials only over TLS, so for a plain-HTTP
//! server that authenticates the command is curl with a bearer token, and the hint says why.

use std::net::SocketAddr;

use crate::Options;
use crate::security::{AuthorizationMode, pki};

/// The lines to print once the server listens on `addr`, for the flags as given (before
/// `--pki-dir` fills in the files it serves). The first is `try: COMMAND`, a command line
/// whose words are separated by single spaces (upper-case words are placeholders).
pub fn start_hint(opts: &Options, addr: SocketAddr) -> Vec<String> {
    let s = &opts.security;
    let server = format!("{}://{}", opts.scheme(), pki::dialable(addr));
    let ca = opts
        .tls_cert_file
        .as_ref()
        .map(|c| format!(" --certificate-authority {}", c.display()));
    let ca_note = opts.tls_cert_file.as_ref().map(|c| {
        format!(
            "--certificate-authority: {} itself if it is self-signed, else the CA that signed it",
            c.display()
        )
    });
    if let Some(dir) = &s.pki_dir {
        let kubeconfig = dir.join("admin.kubeconfig");
        let mut lines = vec![
            format!(
                "try: kubectl --kubeconfig {} get pods -A",
                kubeconfig.display()
            ),
            format!(
                "(the admin kubeconfig of --pki-dir: TLS verified with {}, a client certificate \
                 of {} in system:masters, RBAC on)",
                dir.join("ca.crt").display(),
                pki::ADMIN_USER
            ),
        ];
        if let Some(c) = &opts.tls_cert_file {
            lines.push(format!(
                "(the server presents --tls-cert-file {}, not the --pki-dir serving certificate: \
                 the kubeconfig verifies it only if {} signed it)",
                c.display(),
                dir.join("ca.crt").display()
            ));
        }
        return lines;
    }
    let authenticates = s.has_authenticator() || !s.authorization_mode.is_empty();
    if !authenticates {
        // With TLS, kubectl asks for a password unless it has a credential to send.
        let trust = ca
            .map(|c| format!("{c} --token unused"))
            .unwrap_or_default();
        let mut lines = vec![
            format!("try: kubectl --server {server}{trust} get pods -A"),
            "(this server does not authenticate: every client is a cluster administrator, \
             system:unsecured in system:masters, like upstream's old insecure port; \
             --pki-dir DIR secures it)"
                .to_owned(),
        ];
        if let Some(n) = ca_note {
            lines.push(format!(
                "(any --token will do: it only stops kubectl asking for a password; {n})"
            ));
        }
        return lines;
    }
    let mut accepted = Vec::new();
    if let Some(f) = &s.token_auth_file {
        accepted.push(format!("--token TOKEN with a token of {}", f.display()));
    }
    if s.wants_service_accounts() {
        accepted
            .push("--token TOKEN with a ServiceAccount token (kubectl create token NAME)".into());
    }
    if let Some(f) = &s.client_ca_file {
        accepted.push(format!(
            "--client-certificate CERT --client-key KEY with a certificate signed by {}",
            f.display()
        ));
    }
    let credential = if s.token_auth_file.is_some() || s.wants_service_accounts() {
        " --token TOKEN"
    } else if s.client_ca_file.is_some() {
        " --client-certificate CERT --client-key KEY"
    } else {
        ""
    };
    let anonymous = s.anonymous_auth
        && !s
            .authorization_mode
            .contains(&AuthorizationMode::AlwaysAllow);
    let without = if anonymous {
        "a request without a credential is system:anonymous"
    } else {
        "a request without a credential is refused (401)"
    };
    let mut lines = Vec::new();
    if opts.tls_cert_file.is_none() && !credential.is_empty() {
        // Only bearer tokens work without TLS (client certificates need it).
        lines.push(format!(
            "try: curl --oauth2-bearer TOKEN {server}/api/v1/pods"
        ));
        lines.push(
            "(kubectl sends credentials only over TLS, so over this plain-HTTP address it is \
             anonymous: serve TLS with --tls-cert-file/--tls-private-key-file, or --pki-dir DIR, \
             for kubectl)"
                .to_owned(),
        );
    } else {
        lines.push(format!(
            "try: kubectl --server {server}{}{credential} get pods -A",
            ca.unwrap_or_default()
        ));
    }
    if accepted.is_empty() {
        lines.push(format!(
            "(no authenticator is configured: {without}, authorized by --authorization-mode)"
        ));
    } else {
        lines.push(format!(
            "(this server authenticates every request: use {}; {without}; a bad credential \
             is refused (401))",
            accepted.join(", or ")
        ));
    }
    if let Some(n) = ca_note {
        lines.push(format!("({n})"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn hint(args: &[&str], addr: &str) -> Vec<String> {
        let opts =
            Options::parse_from(std::iter::once("listwatch-apiserver").chain(args.iter().copied()));
        start_hint(&opts, addr.parse().unwrap())
    }

    #[test]
    fn the_quick_start_says_it_does_not_authenticate() {
        let h = hint(&[], "127.0.0.1:8080");
        assert_eq!(
            h[0],
            "try: kubectl --server http://127.0.0.1:8080 get pods -A"
        );
        assert!(h[1].contains("does not authenticate"), "{h:?}");
        let h = hint(
            &[
                "--tls-cert-file",
                "c.pem",
                "--tls-private-key-file",
                "k.pem",
            ],
            "127.0.0.1:8443",
        );
        assert_eq!(
            h[0],
            "try: kubectl --server https://127.0.0.1:8443 --certificate-authority c.pem --token unused get pods -A"
        );
        assert!(h[2].contains("any --token will do"), "{h:?}");
    }

    #[test]
    fn pki_dir_points_at_its_kubeconfig() {
        let h = hint(
            &["--pki-dir", "/var/lib/lw", "--bind", "0.0.0.0:6443"],
            "0.0.0.0:6443",
        );
        assert_eq!(
            h[0],
            "try: kubectl --kubeconfig /var/lib/lw/admin.kubeconfig get pods -A"
        );
        assert!(!h.concat().contains("does not authenticate"));
    }

    #[test]
    fn an_authenticating_server_names_the_credentials_it_takes() {
        let h = hint(&["--token-auth-file", "t.csv"], "127.0.0.1:8080");
        assert_eq!(
            h[0],
            "try: curl --oauth2-bearer TOKEN http://127.0.0.1:8080/api/v1/pods"
        );
        assert!(
            h[1].contains("kubectl sends credentials only over TLS"),
            "{h:?}"
        );
        assert!(h[2].contains("a token of t.csv"), "{h:?}");
        assert!(h[2].contains("system:anonymous"), "{h:?}");
        assert!(!h.concat().contains("does not authenticate"));
        assert!(!h.concat().contains("unused"));
        let tls = [
            "--token-auth-file",
            "t.csv",
            "--tls-cert-file",
            "c.pem",
            "--tls-private-key-file",
            "k.pem",
        ];
        let h = hint(&tls, "127.0.0.1:8443");
        assert_eq!(
            h[0],
            "try: kubectl --server https://127.0.0.1:8443 --certificate-authority c.pem --token TOKEN get pods -A"
        );
        let h = hint(
            &[
                "--tls-cert-file",
                "c.pem",
                "--tls-private-key-file",
                "k.pem",
                "--client-ca-file",
                "ca.pem",
                "--anonymous-auth=false",
                "--bind",
                "[::]:6443",
            ],
            "[::]:6443",
        );
        assert_eq!(
            h[0],
            "try: kubectl --server https://[::1]:6443 --certificate-authority c.pem --client-certificate CERT --client-key KEY get pods -A"
        );
        assert!(h[1].contains("signed by ca.pem"), "{h:?}");
        assert!(h[1].contains("refused (401)"), "{h:?}");
        let h = hint(&["--authorization-mode", "RBAC"], "127.0.0.1:8080");
        assert!(h[1].contains("no authenticator is configured"), "{h:?}");
    }
}
