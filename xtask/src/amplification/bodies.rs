//! Generators of legal-but-nasty bodies, written as text (std only): wide objects, deep
//! nesting under long keys, long lists, many managedFields entries, many patch operations,
//! many selector terms, and a protobuf ConfigMap.
//!
//! Invariant: every generator is deterministic in its arguments, so a family's sizes differ
//! only in the scaled dimension; every body stays under the server's 100-level nesting limit.

/// A JSON string literal (the generators only use ASCII letters, digits, `-`, `_` and `.`,
/// so nothing needs escaping beyond quoting).
fn q(s: &str) -> String {
    format!("\"{s}\"")
}

/// `n` key/value pairs `"k0":"vvv…"` (32-byte values).
pub fn data_pairs(n: u64) -> String {
    let v = "v".repeat(32);
    (0..n)
        .map(|i| format!("\"k{i}\":{}", q(&v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A ConfigMap with `n` data keys, and extra `,"metadata"...` fields merged in by `meta_extra`.
pub fn configmap(name: &str, n: u64, meta_extra: &str) -> String {
    format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":{}{meta_extra}}},\"data\":{{{}}}}}",
        q(name),
        data_pairs(n)
    )
}

/// A key of `len` bytes unique to (`level`, `i`).
pub fn long_key(level: u64, i: u64, len: usize) -> String {
    let mut k = format!("k{level}_{i}_");
    while k.len() < len {
        k.push('x');
    }
    k
}

/// An object nested `depth` levels, each level with `leaves` string leaves and one child,
/// every key `keylen` bytes long.
pub fn deep(depth: u64, leaves: u64, keylen: usize) -> String {
    let mut s = String::from("{}");
    for d in 0..depth {
        let mut level = String::from("{");
        for i in 0..leaves {
            level.push_str(&format!("{}:\"v\",", q(&long_key(d, i, keylen))));
        }
        level.push_str(&format!("{}:{s}}}", q(&long_key(d, leaves, keylen))));
        s = level;
    }
    s
}

/// A chain of `depth` levels of `keylen`-byte keys with `leaves` small objects at its end.
pub fn chain_leaves(depth: u64, keylen: usize, leaves: u64) -> String {
    let bottom: Vec<String> = (0..leaves)
        .map(|i| format!("\"l{i}\":{{\"a\":1}}"))
        .collect();
    let mut s = format!("{{{}}}", bottom.join(","));
    for d in 0..depth {
        s = format!("{{{}:{s}}}", q(&long_key(d, 0, keylen)));
    }
    s
}

/// The same nesting as [`deep`] as a YAML block (two spaces per level).
pub fn deep_yaml(depth: u64, leaves: u64, keylen: usize, indent: usize) -> String {
    let mut out = String::new();
    for d in (0..depth).rev() {
        let pad = " ".repeat(indent + 2 * (depth - 1 - d) as usize);
        for i in 0..leaves {
            out.push_str(&format!("{pad}{}: v\n", long_key(d, i, keylen)));
        }
        if d == 0 {
            out.push_str(&format!("{pad}{}: {{}}\n", long_key(d, leaves, keylen)));
        } else {
            out.push_str(&format!("{pad}{}:\n", long_key(d, leaves, keylen)));
        }
    }
    out
}

/// A `Blob` (the harness's schemaless custom resource) with `spec`.
pub fn blob(name: &str, spec: &str) -> String {
    format!(
        "{{\"apiVersion\":\"amp.example.com/v1\",\"kind\":\"Blob\",\"metadata\":{{\"name\":{}}},\"spec\":{spec}}}",
        q(name)
    )
}

/// A list of `n` small objects.
pub fn items(n: u64) -> String {
    let v: Vec<String> = (0..n)
        .map(|i| format!("{{\"name\":\"i{i}\",\"value\":{i}}}"))
        .collect();
    format!("[{}]", v.join(","))
}

/// `n` containers named `c0..`.
pub fn containers(n: u64, image: &str) -> String {
    let v: Vec<String> = (0..n)
        .map(|i| format!("{{\"name\":\"c{i}\",\"image\":{}}}", q(image)))
        .collect();
    format!("[{}]", v.join(","))
}

/// A pod with `n` containers and `gates` readiness gates (condition types `g0..`).
pub fn pod(name: &str, n: u64, gates: u64) -> String {
    let g: Vec<String> = (0..gates)
        .map(|i| format!("{{\"conditionType\":\"example.com/g{i}\"}}"))
        .collect();
    format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":{}}},\"spec\":{{\"containers\":{},\"readinessGates\":[{}]}}}}",
        q(name),
        containers(n, "img"),
        g.join(",")
    )
}

/// A merge patch of a pod's status with `n` conditions, one per readiness gate.
pub fn pod_conditions(n: u64) -> String {
    let c: Vec<String> = (0..n)
        .map(|i| format!("{{\"type\":\"example.com/g{i}\",\"status\":\"True\"}}"))
        .collect();
    format!(
        "{{\"status\":{{\"phase\":\"Running\",\"conditions\":[{}]}}}}",
        c.join(",")
    )
}

/// `n` managedFields entries (`Update` by `m0..`, each owning one data key).
pub fn managed_fields(n: u64) -> String {
    let v: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "{{\"manager\":\"m{i}\",\"operation\":\"Update\",\"apiVersion\":\"v1\",\"time\":\"2024-01-01T00:00:00Z\",\"fieldsType\":\"FieldsV1\",\"fieldsV1\":{{\"f:data\":{{\"f:k{i}\":{{}}}}}}}}"
            )
        })
        .collect();
    format!(",\"managedFields\":[{}]", v.join(","))
}

/// A JSON patch of `n` `add` operations on `/data/kI`.
pub fn json_patch_adds(n: u64) -> String {
    let v: Vec<String> = (0..n)
        .map(|i| format!("{{\"op\":\"add\",\"path\":\"/data/k{i}\",\"value\":\"v\"}}"))
        .collect();
    format!("[{}]", v.join(","))
}

/// A JSON patch of `n` removals of `/spec/arr/0`, then a `test` that fails (nothing is
/// stored, the request is answered 422 after doing all the work).
pub fn json_patch_remove_front(n: u64) -> String {
    let mut v: Vec<String> = (0..n)
        .map(|_| "{\"op\":\"remove\",\"path\":\"/spec/arr/0\"}".to_owned())
        .collect();
    v.push("{\"op\":\"test\",\"path\":\"/spec/arr/0\",\"value\":-1}".to_owned());
    format!("[{}]", v.join(","))
}

/// `[0, 1, …, n-1]`.
pub fn int_array(n: u64) -> String {
    let v: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    format!("[{}]", v.join(","))
}

/// A label selector of `n` requirements `aI!=x`.
pub fn label_terms(n: u64) -> String {
    (0..n)
        .map(|i| format!("a{i}!=x"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A set-based label selector `a notin (v0,…)` with `n` values.
pub fn label_notin(n: u64) -> String {
    let v: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
    format!("a%20notin%20({})", v.join(","))
}

/// A field selector of `n` requirements `metadata.name!=xI`.
pub fn field_terms(n: u64) -> String {
    (0..n)
        .map(|i| format!("metadata.name!=x{i}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A ConfigMap with `n` data keys in YAML.
pub fn configmap_yaml(name: &str, n: u64) -> String {
    let v = "v".repeat(32);
    let mut s = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n");
    for i in 0..n {
        s.push_str(&format!("  k{i}: {v}\n"));
    }
    s
}

/// A Blob nested as [`deep`] in YAML.
pub fn blob_yaml(name: &str, depth: u64, leaves: u64, keylen: usize) -> String {
    format!(
        "apiVersion: amp.example.com/v1\nkind: Blob\nmetadata:\n  name: {name}\nspec:\n{}",
        deep_yaml(depth, leaves, keylen, 2)
    )
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited protobuf field.
fn field(tag: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint((tag << 3) | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// A ConfigMap with `n` data keys in Kubernetes' protobuf envelope (`k8s\0` + `Unknown`).
pub fn configmap_protobuf(name: &str, n: u64) -> Vec<u8> {
    let mut meta = Vec::new();
    field(1, name.as_bytes(), &mut meta);
    let mut cm = Vec::new();
    field(1, &meta, &mut cm);
    let v = "v".repeat(32);
    for i in 0..n {
        let mut entry = Vec::new();
        field(1, format!("k{i}").as_bytes(), &mut entry);
        field(2, v.as_bytes(), &mut entry);
        field(2, &entry, &mut cm);
    }
    let mut type_meta = Vec::new();
    field(1, b"v1", &mut type_meta);
    field(2, b"ConfigMap", &mut type_meta);
    let mut unknown = Vec::new();
    field(1, &type_meta, &mut unknown);
    field(2, &cm, &mut unknown);
    let mut out = b"k8s\0".to_vec();
    out.extend_from_slice(&unknown);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_nests_as_asked() {
        let d = deep(3, 1, 4);
        assert_eq!(d.matches('{').count(), 4, "{d}");
        assert!(d.starts_with("{\"k2_0_\":\"v\",\"k2_1_\":{"), "{d}");
        let y = deep_yaml(2, 1, 4, 0);
        assert_eq!(y, "k1_0_: v\nk1_1_:\n  k0_0_: v\n  k0_1_: {}\n");
    }
}
