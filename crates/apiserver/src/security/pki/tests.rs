//! Tests of `--pki-dir`: generation, reuse, regeneration of only what changed, modes.

use super::*;

fn read(pki: &Pki, name: &str) -> Vec<u8> {
    std::fs::read(pki.path(name)).unwrap()
}

/// Whether `server.crt` verifies, against `ca.crt`, for `name` (a DNS name or an address).
fn serves(pki: &Pki, name: &str) -> bool {
    use rustls::client::danger::ServerCertVerifier;
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        roots(&read(pki, "ca.crt")).unwrap(),
        provider(),
    )
    .build()
    .unwrap();
    let cert = first_cert(&read(pki, "server.crt")).unwrap();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    verifier
        .verify_server_cert(&cert, &[], &name, &[], UnixTime::now())
        .is_ok()
}

/// A temporary directory only its owner can enter, as `--pki-dir` wants an existing one.
fn private_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    dir
}

#[cfg(unix)]
fn mode(pki: &Pki, name: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(pki.path(name))
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn generates_once_and_the_admin_certificate_verifies() {
    let dir = private_tempdir();
    let bind: SocketAddr = "127.0.0.1:6443".parse().unwrap();
    let pki = Pki::ensure(dir.path(), bind, &[]).unwrap();
    let before: Vec<_> = ["ca.crt", "server.crt", "admin.crt", "service-account.pub"]
        .iter()
        .map(|f| read(&pki, f))
        .collect();
    Pki::ensure(dir.path(), bind, &[]).unwrap();
    let after: Vec<_> = ["ca.crt", "server.crt", "admin.crt", "service-account.pub"]
        .iter()
        .map(|f| read(&pki, f))
        .collect();
    assert_eq!(before, after, "everything reused");
    let ca = listwatch_auth::authn::ClientCa::load(&pki.path("ca.crt")).unwrap();
    let admin = CertificateDer::from_pem_file(pki.path("admin.crt")).unwrap();
    let user = ca.authenticate(&[admin]).unwrap().unwrap();
    assert_eq!(user.name, ADMIN_USER);
    assert!(user.in_group("system:masters"));
    for name in [
        "localhost",
        "127.0.0.1",
        "::1",
        "kubernetes",
        "kubernetes.default.svc",
    ] {
        assert!(serves(&pki, name), "{name}");
    }
    assert!(!serves(&pki, "192.0.2.200"));
    let kc = pki.write_kubeconfig(bind).unwrap();
    let text = std::fs::read_to_string(kc).unwrap();
    assert!(text.contains("server: https://127.0.0.1:6443"));
    #[cfg(unix)]
    for key in [
        "ca.key",
        "server.key",
        "admin.key",
        "service-account.key",
        "admin.kubeconfig",
    ] {
        assert_eq!(mode(&pki, key), 0o600, "{key}");
    }
}

#[test]
fn a_wildcard_bind_names_the_host_name_and_the_interface_addresses() {
    let dir = private_tempdir();
    let pki = Pki::ensure(dir.path(), "0.0.0.0:6443".parse().unwrap(), &[]).unwrap();
    let addrs: Vec<IpAddr> = interface_addresses()
        .into_iter()
        .filter(IpAddr::is_ipv4)
        .collect();
    // The machine this runs on has a network interface (else nothing beyond loopback can
    // reach a wildcard bind either).
    assert!(!addrs.is_empty(), "no interface address found");
    for ip in addrs {
        assert!(serves(&pki, &ip.to_string()), "{ip}");
    }
    if let Some(h) = hostname() {
        assert!(serves(&pki, &h), "{h}");
    }
    let kc = pki
        .write_kubeconfig("0.0.0.0:6443".parse().unwrap())
        .unwrap();
    assert!(
        std::fs::read_to_string(kc)
            .unwrap()
            .contains("server: https://127.0.0.1:6443")
    );
    assert_eq!(
        dialable("[::]:6443".parse().unwrap()),
        "[::1]:6443".parse().unwrap()
    );
}

#[test]
fn new_names_remake_the_serving_certificate_and_keep_the_ca() {
    let dir = private_tempdir();
    let bind: SocketAddr = "127.0.0.1:6443".parse().unwrap();
    let pki = Pki::ensure(dir.path(), bind, &[]).unwrap();
    let (ca, admin, server) = (
        read(&pki, "ca.crt"),
        read(&pki, "admin.crt"),
        read(&pki, "server.crt"),
    );
    assert!(!serves(&pki, "api.example.com"));
    let extra = ["10.1.2.3".to_owned(), "api.example.com".to_owned()];
    Pki::ensure(dir.path(), bind, &extra).unwrap();
    assert_eq!(read(&pki, "ca.crt"), ca, "the CA is kept");
    assert_eq!(
        read(&pki, "admin.crt"),
        admin,
        "the admin certificate is kept"
    );
    assert_ne!(read(&pki, "server.crt"), server);
    for name in ["10.1.2.3", "api.example.com", "localhost", "127.0.0.1"] {
        assert!(serves(&pki, name), "{name}");
    }
    // The same names again: nothing changes.
    let server = read(&pki, "server.crt");
    Pki::ensure(dir.path(), bind, &extra).unwrap();
    assert_eq!(read(&pki, "server.crt"), server);
    // Another bind address is named too.
    Pki::ensure(dir.path(), "192.0.2.201:6443".parse().unwrap(), &extra).unwrap();
    assert!(serves(&pki, "192.0.2.201"));
    assert_eq!(read(&pki, "ca.crt"), ca);
    // A wildcard SAN covers its subdomains.
    Pki::ensure(dir.path(), bind, &["*.apps.example.com".to_owned()]).unwrap();
    assert!(serves(&pki, "x.apps.example.com"));
}

#[test]
fn expiring_or_foreign_certificates_are_remade_with_the_ca() {
    let dir = private_tempdir();
    let bind: SocketAddr = "127.0.0.1:6443".parse().unwrap();
    let pki = Pki::ensure(dir.path(), bind, &[]).unwrap();
    let ca = read(&pki, "ca.crt");
    let key = KeyPair::from_pem(&String::from_utf8(read(&pki, "ca.key")).unwrap()).unwrap();
    let issuer = Issuer::from_ca_cert_pem(&String::from_utf8(ca.clone()).unwrap(), key).unwrap();
    // A serving certificate with every name but 10 days left.
    let names = ServingNames::wanted(bind, &[]);
    let short_key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(names.dns.iter().cloned().collect::<Vec<_>>()).unwrap();
    p.subject_alt_names
        .extend(names.ips.iter().copied().map(SanType::IpAddress));
    validity(&mut p, 10);
    let short = p.signed_by(&short_key, &issuer).unwrap().pem();
    std::fs::write(pki.path("server.crt"), &short).unwrap();
    // An admin certificate of another CA.
    let (_, other) = new_ca().unwrap();
    let (foreign, foreign_key) = admin_cert(&other).unwrap();
    std::fs::write(pki.path("admin.crt"), &foreign).unwrap();
    std::fs::write(pki.path("admin.key"), &foreign_key).unwrap();
    Pki::ensure(dir.path(), bind, &[]).unwrap();
    assert_eq!(read(&pki, "ca.crt"), ca);
    assert_ne!(read(&pki, "server.crt"), short.as_bytes());
    assert!(serves(&pki, "localhost"));
    assert_ne!(read(&pki, "admin.crt"), foreign.as_bytes());
    let client_ca = listwatch_auth::authn::ClientCa::load(&pki.path("ca.crt")).unwrap();
    let admin = CertificateDer::from_pem_file(pki.path("admin.crt")).unwrap();
    assert!(client_ca.authenticate(&[admin]).unwrap().is_some());
}

#[test]
fn a_lost_ca_remakes_everything_it_signed() {
    let dir = private_tempdir();
    let bind: SocketAddr = "127.0.0.1:6443".parse().unwrap();
    let pki = Pki::ensure(dir.path(), bind, &[]).unwrap();
    let (ca, admin, sa) = (
        read(&pki, "ca.crt"),
        read(&pki, "admin.crt"),
        read(&pki, "service-account.pub"),
    );
    std::fs::remove_file(pki.path("ca.key")).unwrap();
    Pki::ensure(dir.path(), bind, &[]).unwrap();
    assert_ne!(read(&pki, "ca.crt"), ca);
    assert_ne!(read(&pki, "admin.crt"), admin);
    assert!(serves(&pki, "localhost"));
    assert_eq!(
        read(&pki, "service-account.pub"),
        sa,
        "not signed by the CA: kept"
    );
    // Half a ServiceAccount key pair is a new pair.
    std::fs::remove_file(pki.path("service-account.pub")).unwrap();
    Pki::ensure(dir.path(), bind, &[]).unwrap();
    assert_ne!(read(&pki, "service-account.pub"), sa);
    listwatch_auth::authn::TokenIssuer::load(&pki.path("service-account.key"), "iss", vec![])
        .unwrap();
}

#[test]
fn a_ca_key_that_does_not_match_its_certificate_is_refused() {
    let dir = private_tempdir();
    let bind: SocketAddr = "127.0.0.1:6443".parse().unwrap();
    let pki = Pki::ensure(dir.path(), bind, &[]).unwrap();
    let other = KeyPair::generate().unwrap();
    std::fs::write(pki.path("ca.key"), other.serialize_pem()).unwrap();
    let e = Pki::ensure(dir.path(), bind, &["new.example.com".to_owned()]).unwrap_err();
    assert!(e.to_string().contains("do they belong together"), "{e}");
}

#[cfg(unix)]
#[test]
fn keys_are_0600_after_every_write_whatever_mode_they_had() {
    use std::os::unix::fs::PermissionsExt;
    let dir = private_tempdir();
    let bind: SocketAddr = "127.0.0.1:6443".parse().unwrap();
    let pki = Pki::ensure(dir.path(), bind, &[]).unwrap();
    let loosen = |name: &str| {
        std::fs::set_permissions(pki.path(name), std::fs::Permissions::from_mode(0o644)).unwrap();
    };
    // The serving certificate goes (new names); its key is rewritten in place.
    loosen("server.key");
    Pki::ensure(dir.path(), bind, &["new.example.com".to_owned()]).unwrap();
    assert!(serves(&pki, "new.example.com"));
    assert_eq!(mode(&pki, "server.key"), 0o600);
    // The kubeconfig holds the admin key.
    pki.write_kubeconfig("127.0.0.1:1".parse().unwrap())
        .unwrap();
    loosen("admin.kubeconfig");
    pki.write_kubeconfig("127.0.0.1:2".parse().unwrap())
        .unwrap();
    assert_eq!(mode(&pki, "admin.kubeconfig"), 0o600);
    // A directory it creates is the owner's only.
    let nested = dir.path().join("a/b");
    let p = Pki::ensure(&nested, bind, &[]).unwrap();
    let m = std::fs::metadata(&p.dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(m, 0o700);
}

/// Issue 28 (red team): a `--pki-dir` another user made first, or one others can enter, is
/// refused before a key is written; a link to a directory of another user too. Without the
/// check the server wrote its CA and admin keys into the 0777 directory.
#[cfg(unix)]
#[test]
fn a_directory_others_can_reach_is_refused_and_nothing_is_written() {
    use std::os::unix::fs::PermissionsExt;
    let dir = private_tempdir();
    let bind: SocketAddr = "127.0.0.1:6443".parse().unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = Pki::ensure(&open, bind, &[]).unwrap_err().to_string();
    assert!(
        e.contains("its mode is 0777") && e.contains("chmod 700"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_dir(&open).unwrap().count(),
        0,
        "nothing written"
    );
    // Group-readable is refused too; the owner's own 0700 is accepted.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o750)).unwrap();
    assert!(Pki::ensure(&open, bind, &[]).is_err());
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o700)).unwrap();
    Pki::ensure(&open, bind, &[]).unwrap();
    // A link to an open directory is judged by its target.
    let target = dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(Pki::ensure(&link, bind, &[]).is_err());
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    // A file is not a directory.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(Pki::ensure(&file, bind, &[]).is_err());
}

/// Ownership, decided apart from the file system (a test cannot make another user's
/// directory without being root).
#[test]
fn a_directory_or_link_of_another_user_is_refused() {
    let me = 1000;
    assert_eq!(dir_unfit(None, me, 0o40700, me), None);
    let other = dir_unfit(None, 0, 0o40700, me).unwrap();
    assert!(other.contains("owned by uid 0"), "{other}");
    let link = dir_unfit(Some(0), me, 0o40700, me).unwrap();
    assert!(link.contains("link owned by uid 0"), "{link}");
    assert_eq!(dir_unfit(Some(me), me, 0o40700, me), None);
    assert!(dir_unfit(None, me, 0o40701, me).is_some());
}

/// The test environment's `--pki-dir` (thrown away with it) is written without a flush per
/// file: the same files, the same modes.
#[cfg(unix)]
#[test]
fn an_ephemeral_directory_gets_the_same_files_and_modes() {
    let dir = private_tempdir();
    let pki = Pki::ensure_with(
        &dir.path().join("pki"),
        "127.0.0.1:6443".parse().unwrap(),
        &[],
        false,
    )
    .unwrap();
    assert!(!pki.durable);
    for key in ["ca.key", "server.key", "admin.key", "service-account.key"] {
        assert_eq!(mode(&pki, key), 0o600, "{key}");
    }
    assert!(serves(&pki, "127.0.0.1"));
    pki.write_kubeconfig("127.0.0.1:1".parse().unwrap())
        .unwrap();
    assert_eq!(mode(&pki, "admin.kubeconfig"), 0o600);
}
