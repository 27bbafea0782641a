//! CertificateSigningRequests as upstream's strategies write them (issue 28 item 2): a
//! create records the requesting user in `spec.username`/`uid`/`groups`/`extra` whatever
//! the body said (`csrStrategy.PrepareForCreate`), and an `/approval` write changes only
//! the status' conditions (`csrApprovalStrategy`), through kubectl and the Python client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, run_ok};
use serde_json::Value;

const CSR: &str = "apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {name: forged}
spec:
  signerName: example.com/signer
  usages: [client auth]
  request: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIcU1JR1NBZ0VBTURBeEZ6QVZCZ05WQkFNTURuTjVjM1JsYlRwdWIyUmxPbTR4TVJVd0V3WURWUVFLREF4egplWE4wWlcwNmJtOWtaWE13V1RBVEJnY3Foa2pPUFFJQkJnZ3Foa2pPUFFNQkJ3TkNBQVRQRDhIWUU0cDI5V25LCmN1dDBBRi95QXo4WTA3MzZOTC9RMTRxN0xHMVkrMjhyaVVmL3V6UkVRSHlmTTRKU1JVSmxCR2s0UlhrS2QwOFoKNkVIdkh2eUdvQUF3Q2dZSUtvWkl6ajBFQXdJRFJ3QXdSQUlnU3pzQ0RZUVFyZDlBQzZQRHAxeXhVOGRZVlNKYgpFMFNXYXNZbUdEelJuS2NDSUgvUjlsdmp0Wm5NVTZudXJva2R6U3NrMHQxRlJsK2hVNzJ2QXVOL3Rzc1cKLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==
  username: mallory
  uid: mallory-uid
  groups: [wheel]
  extra: {scopes: [everything]}
";

const APPROVE: &str = r#"
import sys
from kubernetes import client
c = client.Configuration()
c.host = sys.argv[1]
api = client.CertificatesV1Api(client.ApiClient(c))
csr = api.read_certificate_signing_request("forged")
csr.status = client.V1CertificateSigningRequestStatus(
    certificate="Zm9yZ2Vk",
    conditions=[client.V1CertificateSigningRequestCondition(
        type="Approved", status="True", reason="ByTest", message="ok")])
out = api.replace_certificate_signing_request_approval("forged", csr)
print("approved", out.status.certificate, [(x.type, x.reason) for x in out.status.conditions])
back = api.read_certificate_signing_request("forged")
print("stored", back.status.certificate, [(x.type, x.reason) for x in back.status.conditions])
"#;

#[test]
#[ignore = "needs kubectl and the Python kubernetes client"]
fn a_csr_records_its_requester_and_approval_changes_only_the_conditions() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    let file = dir.path().join("csr.yaml");
    std::fs::write(&file, CSR).unwrap();
    run_ok(k().arg("create").arg("-f").arg(&file));
    let csr: Value =
        serde_json::from_str(&run_ok(k().args(["get", "csr", "forged", "-o", "json"]))).unwrap();
    let spec = &csr["spec"];
    // The insecure mode's user (the server's only one here).
    assert_eq!(spec["username"], "system:unsecured", "{csr}");
    assert!(
        spec.get("uid").is_none() && spec.get("extra").is_none(),
        "{csr}"
    );
    let groups = spec["groups"].as_array().unwrap();
    assert!(!groups.contains(&Value::from("wheel")), "{csr}");
    assert!(
        groups.contains(&Value::from("system:authenticated")),
        "{csr}"
    );

    let text = common::python::python_ok(APPROVE, &[&server.url]);
    assert!(
        text.contains("approved None [('Approved', 'ByTest')]"),
        "{text}"
    );
    assert!(
        text.contains("stored None [('Approved', 'ByTest')]"),
        "{text}"
    );
}
