//! W2, the write path against its bare baseline (issue 31, item 1): the server's CPU per
//! create, merge PATCH and GET of a ~1.5 KB pod, sequential on one keep-alive HTTP/1.1
//! connection, beside `write-bare` (benches/src/bin/write_bare.rs: hyper + serde_json + a
//! map doing the same I/O) started the same way; then the throughput of 64 concurrent
//! clients; and the same figures of the server with `--data-dir` (durable, on the disk the
//! temporary directory is on) and of the realistic configuration (`realistic.rs`: its own
//! data directory, TLS, a token authenticator and RBAC) beside them.
//!
//! Each round starts each side fresh, in the order bare, ours, ours with `--data-dir`, ours
//! realistic, so
//! that load from elsewhere on a shared machine falls on all of them alike; the figures are
//! the median of the rounds, with their range in the notes. CPU is the server's, read to the
//! nanosecond from a cgroup of its own (`sys::CpuMeter`; /proc's 10 ms ticks only where no
//! cgroup can be made: the bare program's phases are a few ticks long).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::http::{Conn, Target};
use crate::realistic::{self, Config};
use crate::report::{Bound, Goal, Metric, Report, Spread};
use crate::sys::Server;

type Result<T> = std::result::Result<T, String>;

/// Requests per sequential phase (create, then merge PATCH, then GET).
const SEQ: usize = 3_000;
/// Concurrent clients, each on its own connection, and the requests each sends per phase.
const CLIENTS: usize = 64;
const PER_CLIENT: usize = 60;
/// Rounds of the three sides; `LISTWATCH_W2_ROUNDS` overrides (at least 1).
const ROUNDS: usize = 3;
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// A ~1.5 KB pod as a controller would create it (a Deployment's replica).
fn pod(name: &str, i: usize) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default","labels":{{"app":"web","tier":"frontend","pod-template-hash":"7d4b9c8f5","version":"1.27.3"}},"annotations":{{"kubernetes.io/config.seen":"2026-01-01T00:00:00.000000000Z","prometheus.io/scrape":"true","prometheus.io/port":"9090"}}}},"spec":{{"nodeName":"node-{:04}","restartPolicy":"Always","schedulerName":"default-scheduler","serviceAccountName":"default","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","containers":[{{"name":"web","image":"registry.example/web:1.27.3","args":["--port=8080","--metrics-port=9090","--log-level=info"],"ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}},{{"name":"metrics","containerPort":9090,"protocol":"TCP"}}],"env":[{{"name":"MODE","value":"production"}},{{"name":"REGION","value":"eu-west-1"}},{{"name":"CACHE_SIZE","value":"256Mi"}},{{"name":"FEATURE_FLAGS","value":"alpha,beta,gamma"}}],"resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}},"limits":{{"cpu":"500m","memory":"512Mi"}}}},"readinessProbe":{{"httpGet":{{"path":"/healthz","port":8080,"scheme":"HTTP"}},"periodSeconds":10,"timeoutSeconds":1,"successThreshold":1,"failureThreshold":3}},"volumeMounts":[{{"name":"config","mountPath":"/etc/web","readOnly":true}},{{"name":"data","mountPath":"/var/lib/web"}}],"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}],"volumes":[{{"name":"config","configMap":{{"name":"web-config","defaultMode":420}}}},{{"name":"data","emptyDir":{{}}}}],"tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}]}}}}"#,
        i % 5000
    )
    .into_bytes()
}

/// One request to send: the status it must answer, method, path, content type and body.
type Req = (u16, &'static str, String, &'static str, Vec<u8>);

/// The merge PATCH of one label.
fn label_patch(j: usize) -> Vec<u8> {
    format!(r#"{{"metadata":{{"labels":{{"bench":"w{j}"}}}}}}"#).into_bytes()
}

/// One side of the comparison.
#[derive(Clone, Copy, PartialEq)]
enum Side<'a> {
    Bare,
    Ours,
    Durable,
    /// The realistic configuration (`realistic.rs`): `--data-dir` on the disk, TLS, a
    /// token of a user outside `system:masters`, RBAC.
    Realistic,
    /// Another build or configuration of ours, in memory ([`variants`]).
    Variant(&'a Variant),
}

/// A build or configuration of the server measured beside ours in the same rounds, to
/// judge a change before and after in one run: `LISTWATCH_W2_VARIANTS` holds
/// `LABEL=BINARY [FLAG..]` entries separated by `;` (e.g. the build before a change, or
/// ours with `--request-workers 0`).
#[derive(Clone, PartialEq)]
struct Variant {
    label: String,
    bin: PathBuf,
    args: Vec<String>,
}

fn variants() -> Vec<Variant> {
    let spec = std::env::var("LISTWATCH_W2_VARIANTS").unwrap_or_default();
    spec.split(';')
        .filter_map(|v| {
            let (label, rest) = v.trim().split_once('=')?;
            let mut words = rest.split_whitespace();
            Some(Variant {
                label: label.to_owned(),
                bin: PathBuf::from(words.next()?),
                args: words.map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// One side's figures in one round.
#[derive(Default, Clone, Copy)]
struct Round {
    /// Sequential: server CPU µs and wall µs per request.
    create: (f64, f64),
    patch: (f64, f64),
    get: (f64, f64),
    /// 64 clients: requests per second (wall) and server CPU µs per request.
    many_create: (f64, f64),
    many_patch: (f64, f64),
    /// The server's CPU was read to the nanosecond (a cgroup), not in /proc's ticks.
    precise: bool,
}

/// The bare baseline: `$LISTWATCH_WRITE_BARE_BIN`, else `write-bare` beside this program.
fn bare_bin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("LISTWATCH_WRITE_BARE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let p = me.with_file_name("write-bare");
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found: build it with `cargo build --release -p listwatch-benches --bin write-bare` or set LISTWATCH_WRITE_BARE_BIN",
            p.display()
        ))
    }
}

/// Runs `n` requests back to back on `conn`: (server CPU µs, wall µs) per request.
async fn sequential(
    server: &Server,
    conn: &mut Conn,
    n: usize,
    mut one: impl FnMut(usize) -> Req,
) -> Result<(f64, f64)> {
    let reqs: Vec<Req> = (0..n).map(&mut one).collect();
    let (c0, t0) = (server.cpu(), Instant::now());
    for (want, method, path, ct, body) in reqs {
        conn.expect(want, method, &path, ct, &body).await?;
    }
    let per = n as f64;
    Ok((
        (server.cpu() - c0) / per * 1e6,
        t0.elapsed().as_secs_f64() / per * 1e6,
    ))
}

/// `CLIENTS` connections each sending `PER_CLIENT` requests made by `one(client, i)`:
/// (requests per second, server CPU µs per request), and the connections back.
async fn concurrent(
    server: &Server,
    conns: Vec<Conn>,
    one: fn(usize, usize) -> Req,
) -> Result<((f64, f64), Vec<Conn>)> {
    let clients = conns.len();
    // Every request is made before the clock starts: the load generator shares the cores
    // with the server, and building bodies in the timed loop would tax the fast side most.
    let work: Vec<Vec<Req>> = (0..clients)
        .map(|k| (0..PER_CLIENT).map(|i| one(k, i)).collect())
        .collect();
    let (c0, t0) = (server.cpu(), Instant::now());
    let mut tasks = Vec::new();
    for (mut c, reqs) in conns.into_iter().zip(work) {
        tasks.push(tokio::spawn(async move {
            for (want, method, path, ct, body) in reqs {
                c.expect(want, method, &path, ct, &body).await?;
            }
            Ok::<Conn, String>(c)
        }));
    }
    let mut back = Vec::new();
    for t in tasks {
        back.push(t.await.map_err(|e| e.to_string())??);
    }
    let wall = t0.elapsed().as_secs_f64();
    let n = (clients * PER_CLIENT) as f64;
    Ok(((n / wall, (server.cpu() - c0) / n * 1e6), back))
}

fn many_create(k: usize, i: usize) -> Req {
    (
        201,
        "POST",
        PODS.to_owned(),
        JSON,
        pod(&format!("c{k}-{i}"), k * PER_CLIENT + i),
    )
}

fn many_patch(k: usize, i: usize) -> Req {
    (
        200,
        "PATCH",
        format!("{PODS}/c{k}-{i}"),
        MERGE,
        label_patch(i),
    )
}

/// One side's round on a fresh server.
async fn round(side: Side<'_>, bare: &Path, data_dir: &Path) -> Result<Round> {
    let dir = data_dir.to_string_lossy().into_owned();
    // The realistic server's directory (data, PKI, tokens) lives as long as `deployed`.
    let mut deployed = None;
    let server = match side {
        Side::Bare => Server::start_bin(bare, &[])?,
        Side::Ours => Server::start(&["--storage", "embedded"])?,
        Side::Durable => {
            let _ = std::fs::remove_dir_all(data_dir);
            Server::start(&["--storage", "embedded", "--data-dir", &dir])?
        }
        Side::Realistic => {
            let d = realistic::start(
                &crate::sys::apiserver_bin()?,
                Config::Realistic,
                &["--storage", "embedded"],
            )
            .await?;
            let (server, target, rest) = d.split();
            deployed = Some((target, rest));
            server
        }
        Side::Variant(v) => {
            let args: Vec<&str> = v.args.iter().map(String::as_str).collect();
            Server::start_bin(&v.bin, &args)?
        }
    };
    let target: Target = match &deployed {
        Some((t, _)) => t.clone(),
        None => Target::from(server.addr),
    };
    let name = |i: usize| format!("pod-{i:06}");
    let mut conn = Conn::open(target.clone()).await?;
    let mut r = Round {
        create: sequential(&server, &mut conn, SEQ, |i| {
            (201, "POST", PODS.to_owned(), JSON, pod(&name(i), i))
        })
        .await?,
        ..Round::default()
    };
    r.patch = sequential(&server, &mut conn, SEQ, |j| {
        let i = (j * 7919) % SEQ;
        (
            200,
            "PATCH",
            format!("{PODS}/{}", name(i)),
            MERGE,
            label_patch(j),
        )
    })
    .await?;
    r.get = sequential(&server, &mut conn, SEQ, |j| {
        let i = (j * 7919) % SEQ;
        (200, "GET", format!("{PODS}/{}", name(i)), JSON, Vec::new())
    })
    .await?;
    let mut conns = Vec::new();
    for _ in 0..CLIENTS {
        conns.push(Conn::open(target.clone()).await?);
    }
    let (many, conns) = concurrent(&server, conns, many_create).await?;
    r.many_create = many;
    let (many, _) = concurrent(&server, conns, many_patch).await?;
    r.many_patch = many;
    r.precise = server.cpu_precise();
    drop(server);
    drop(deployed);
    if side == Side::Durable {
        let _ = std::fs::remove_dir_all(data_dir);
    }
    Ok(r)
}

fn rounds() -> usize {
    std::env::var("LISTWATCH_W2_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS)
        .max(1)
}

/// Per-round values of one figure, as text.
fn each(v: &[f64]) -> String {
    let parts: Vec<String> = v.iter().map(|x| crate::report::fmt_num(*x)).collect();
    format!("[{}]", parts.join(", "))
}

pub(crate) async fn w2() -> Result<Report> {
    let n = rounds();
    let mut r = Report::new(
        "W2",
        "write path against its bare baseline: sequential create, merge PATCH, GET of a 1.5 KB pod; 64 clients",
        "",
    );
    let bare = bare_bin()?;
    let data_dir = std::env::temp_dir().join(format!("listwatch-w2-{}", std::process::id()));
    let vars = variants();
    let (mut b, mut o, mut d, mut re) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut vr: Vec<Vec<Round>> = vec![Vec::new(); vars.len()];
    for k in 0..n {
        eprintln!("  round {} of {n}", k + 1);
        b.push(round(Side::Bare, &bare, &data_dir).await?);
        o.push(round(Side::Ours, &bare, &data_dir).await?);
        d.push(round(Side::Durable, &bare, &data_dir).await?);
        re.push(round(Side::Realistic, &bare, &data_dir).await?);
        for (v, out) in vars.iter().zip(vr.iter_mut()) {
            out.push(round(Side::Variant(v), &bare, &data_dir).await?);
        }
    }
    let bare_is = "write-bare (hyper + serde_json + a map), same run";
    type Pick = fn(&Round) -> (f64, f64);
    let figures: [(&str, Pick, Option<f64>); 3] = [
        ("create", |x| x.create, Some(1.5)),
        ("merge PATCH of one label", |x| x.patch, Some(1.5)),
        ("GET", |x| x.get, Some(1.2)),
    ];
    let cpu = |v: &[Round], f: Pick| v.iter().map(|x| f(x).0).collect::<Vec<_>>();
    let wall = |v: &[Round], f: Pick| v.iter().map(|x| f(x).1).collect::<Vec<_>>();
    for (what, f, goal) in figures {
        let (ours, base) = (Spread::of(&cpu(&o, f)), Spread::of(&cpu(&b, f)));
        let mut m = Metric::new(
            &format!("sequential {what}: server CPU per request (median of {n} rounds)"),
            "µs",
            ours.median,
        )
        .baseline(base.median, bare_is)
        .note(format!(
            "ours {} {}, bare {} {}",
            ours.text("µs"),
            each(&cpu(&o, f)),
            base.text("µs"),
            each(&cpu(&b, f))
        ));
        if let Some(g) = goal {
            m = m.goal(Goal::Ratio(Bound::AtMost(g)));
        }
        r.push(m);
    }
    for (what, f, _) in figures {
        let (ours, base) = (Spread::of(&wall(&o, f)), Spread::of(&wall(&b, f)));
        r.push(
            Metric::new(
                &format!("sequential {what}: wall time per request (median of {n} rounds)"),
                "µs",
                ours.median,
            )
            .baseline(base.median, bare_is)
            .note(format!(
                "ours {}, bare {}",
                ours.text("µs"),
                base.text("µs")
            )),
        );
    }
    let many: [(&str, Pick); 2] = [
        ("create", |x| x.many_create),
        ("merge PATCH", |x| x.many_patch),
    ];
    for (what, f) in many {
        let (ours, base) = (Spread::of(&cpu(&o, f)), Spread::of(&cpu(&b, f)));
        r.push(
            Metric::new(
                &format!("{CLIENTS} clients, {what}: requests/s (median of {n} rounds)"),
                "req/s",
                ours.median,
            )
            .baseline(base.median, bare_is)
            .goal(Goal::Ratio(Bound::AtLeast(0.6)))
            .note(format!("ours {}, bare {}", ours.text(""), base.text(""))),
        );
    }
    // The durable server beside the bare one (no goal: the bare program keeps nothing).
    let durable: [(&str, Pick); 3] = [
        ("sequential create: server CPU per request", |x| {
            (x.create.0, 0.0)
        }),
        ("sequential merge PATCH: server CPU per request", |x| {
            (x.patch.0, 0.0)
        }),
        ("sequential create: wall time per request", |x| {
            (x.create.1, 0.0)
        }),
    ];
    for (what, f) in durable {
        let (ours, base) = (Spread::of(&cpu(&d, f)), Spread::of(&cpu(&b, f)));
        r.push(
            Metric::new(
                &format!("--data-dir, {what} (median of {n} rounds)"),
                "µs",
                ours.median,
            )
            .baseline(base.median, bare_is)
            .note(format!("ours {}", ours.text("µs"))),
        );
    }
    for (what, f) in many {
        let (ours, base) = (Spread::of(&cpu(&d, f)), Spread::of(&cpu(&b, f)));
        r.push(
            Metric::new(
                &format!(
                    "--data-dir, {CLIENTS} clients, {what}: requests/s (median of {n} rounds)"
                ),
                "req/s",
                ours.median,
            )
            .baseline(base.median, bare_is)
            .note(format!("ours {}", ours.text(""))),
        );
    }
    // The realistic configuration beside the bare program and beside the easy one (no goal:
    // the issue judges the easy configuration against the bare program; this is what the
    // deployment users run costs on top).
    let realistic = |r: &mut Report, what: String, unit: &str, f: Pick| {
        let (real, base, easy) = (
            Spread::of(&cpu(&re, f)),
            Spread::of(&cpu(&b, f)),
            Spread::of(&cpu(&o, f)),
        );
        r.push(
            Metric::new(
                &format!(
                    "realistic (--data-dir, TLS, token + RBAC), {what} (median of {n} rounds)"
                ),
                unit,
                real.median,
            )
            .baseline(base.median, bare_is)
            .note(format!(
                "realistic {} {}; easy {} ({:.2}× easy)",
                real.text(unit),
                each(&cpu(&re, f)),
                easy.text(unit),
                real.median / easy.median.max(f64::MIN_POSITIVE)
            )),
        );
    };
    for (what, f, _) in figures {
        realistic(
            &mut r,
            format!("sequential {what}: server CPU per request"),
            "µs",
            f,
        );
    }
    for (what, f) in many {
        realistic(
            &mut r,
            format!("{CLIENTS} clients, {what}: requests/s"),
            "req/s",
            f,
        );
    }
    for (v, rounds) in vars.iter().zip(&vr) {
        let label = &v.label;
        for (what, f, _) in figures {
            let (ours, base) = (Spread::of(&cpu(rounds, f)), Spread::of(&cpu(&b, f)));
            r.push(
                Metric::new(
                    &format!("variant {label}: sequential {what}, server CPU per request (median of {n} rounds)"),
                    "µs",
                    ours.median,
                )
                .baseline(base.median, bare_is)
                .note(format!("{} {}: {}", v.bin.display(), v.args.join(" "), ours.text("µs"))),
            );
        }
        for (what, f) in many {
            let (ours, base) = (Spread::of(&cpu(rounds, f)), Spread::of(&cpu(&b, f)));
            r.push(
                Metric::new(
                    &format!("variant {label}: {CLIENTS} clients, {what}: requests/s (median of {n} rounds)"),
                    "req/s",
                    ours.median,
                )
                .baseline(base.median, bare_is)
                .note(ours.text("")),
            );
        }
    }
    let conc_cpu = |v: &[Round], f: Pick| v.iter().map(|x| f(x).1).collect::<Vec<_>>();
    r.notes.push(format!(
        "{n} rounds; each round starts each side fresh, in the order bare, ours (in memory), ours \
         with `--data-dir` ({}), ours realistic (its own data directory on the disk, HTTPS, every \
         request with the bearer token of a user outside system:masters authorized by RBAC; \
         the load generator verifies the certificate and pays the TLS work too); per side and round: {SEQ} sequential creates, {SEQ} merge \
         PATCHes of one label and {SEQ} GETs on one keep-alive HTTP/1.1 connection, then \
         {CLIENTS} clients × {PER_CLIENT} creates and × {PER_CLIENT} merge PATCHes. The pod \
         body is {} bytes. Server CPU per request with {CLIENTS} clients, create: ours {}, \
         --data-dir {}, bare {}; merge PATCH: ours {}, --data-dir {}, bare {} (µs, per \
         round). Every request body is built before its phase's clock starts. Server CPU: {}. \
         The load generator shares the machine with the servers: compare the ratios within \
         this run, not the absolute figures across runs.",
        data_dir.display(),
        pod("pod-000000", 0).len(),
        each(&conc_cpu(&o, |x| x.many_create)),
        each(&conc_cpu(&d, |x| x.many_create)),
        each(&conc_cpu(&b, |x| x.many_create)),
        each(&conc_cpu(&o, |x| x.many_patch)),
        each(&conc_cpu(&d, |x| x.many_patch)),
        each(&conc_cpu(&b, |x| x.many_patch)),
        if [&b, &o, &d, &re].iter().all(|v| v.iter().all(|x| x.precise)) {
            "to the nanosecond, each server in a cgroup of its own (cpuacct)"
        } else {
            "from /proc in 10 ms ticks for at least one side (no cgroup could be made): a bare phase of \
             a few ticks is coarse"
        },
    ));
    Ok(r)
}
