//! The daemon end to end, on loopback: apply through the API, traffic through the deployed
//! chains, errors with stable codes, metrics, clean shutdown on SIGTERM, and a restart that
//! restores the deployment from the persistent state without re-applying.

use snic_wire::build::{build, FrameSpec, L4Spec};
use snic_wire::ethernet::MacAddr;
use snic_wire::layout::{parse_inner, parse_vxlan};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);

struct Daemon {
    child: Child,
    api: String,
    data: SocketAddr,
    /// Its pool address, with a `pool:` section.
    pool: Option<SocketAddr>,
    // Kept open: the daemon may write to stdout again.
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &std::path::Path) -> Daemon {
    start_with(dir, "")
}

/// A daemon whose node configuration ends with `extra` (YAML).
fn start_with(dir: &std::path::Path, extra: &str) -> Daemon {
    launch(dir, extra, &[], Stdio::inherit())
}

/// A daemon as [`start_with`], with more `snic run` arguments and its stderr going to `stderr`.
fn launch(dir: &std::path::Path, extra: &str, args: &[&str], stderr: Stdio) -> Daemon {
    launch_bin(env!("CARGO_BIN_EXE_snic").as_ref(), dir, extra, args, stderr)
}

/// The binary a test's node `name` runs: this build's, or the one the environment variable
/// `SNIC_TEST_BIN_<NAME>` names — another release's, to try a rolling upgrade
/// (`scripts/upgrade-check.sh`: two adjacent versions of the pool protocol interoperate).
fn bin_of(name: &str) -> std::path::PathBuf {
    std::env::var_os(format!("SNIC_TEST_BIN_{name}")).map_or_else(|| env!("CARGO_BIN_EXE_snic").into(), Into::into)
}

/// [`launch`] with the binary `bin`.
fn launch_bin(bin: &std::path::Path, dir: &std::path::Path, extra: &str, args: &[&str], stderr: Stdio) -> Daemon {
    let cfg = dir.join("node.yaml");
    std::fs::write(
        &cfg,
        format!("data: 127.0.0.1:0\napi: 127.0.0.1:0\nstate_dir: {}\nvtep_port: null\n{extra}", dir.join("state").display()),
    )
    .unwrap();
    let mut child = Command::new(bin)
        .args(["run", "--config", cfg.to_str().unwrap()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    // "snic: data 127.0.0.1:P (VXLAN/UDP), api http://127.0.0.1:Q, state ..."
    let data = line.split_whitespace().nth(2).expect("data address").parse().unwrap();
    let api = line
        .split_whitespace()
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        .expect("api url")
        .trim_end_matches(',')
        .to_string();
    let pool = line.split_once(", pool ").map(|(_, a)| a.trim().parse().expect("pool address"));
    Daemon { child, api, data, pool, _stdout: out }
}

fn stop(mut d: Daemon) -> i32 {
    // SAFETY: sends SIGTERM to our own child process.
    unsafe { libc::kill(d.child.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "daemon did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn http(method: &str, url: &str, body: &str) -> (u16, serde_json::Value) {
    http_as(method, url, body, None)
}

/// Announces a 2 MiB body and reads the status line: the limit is enforced from the header.
fn oversized(api: &str) -> u16 {
    use std::io::{Read, Write};
    let addr = api.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(c, "POST /v1/apply HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", 8 << 20).unwrap();
    let _ = c.write_all(&[b'a'; 4096]);
    let mut resp = String::new();
    let _ = c.read_to_string(&mut resp);
    resp.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Sends raw request bytes (headers and as much body as given), then reads the whole answer
/// (the connection is closed by the request's `Connection: close` or by the server); the status
/// and the JSON body.
fn raw(api: &str, request: &[u8]) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let addr = api.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    c.write_all(request).unwrap();
    let mut resp = Vec::new();
    let _ = c.read_to_end(&mut resp);
    let resp = String::from_utf8_lossy(&resp);
    let status = resp.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(serde_json::Value::String(body.to_string())))
}

/// Peak resident memory of a process, KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap()
}

/// The demo manifest with routes to the blue and green receivers.
fn demo_with_routes(b: &UdpSocket, g: &UdpSocket) -> String {
    let demo = include_str!("../../../examples/demo.yaml");
    let routes = format!(
        "apiVersion: snic/v1\nkind: Route\nmetadata: {{name: blue-b}}\nspec: {{vni: 100, mac: '{MAC_B}', vtep: '{}'}}\n---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: green-g}}\nspec: {{vni: 300, mac: '{MAC_B}', vtep: '{}'}}\n",
        b.local_addr().unwrap(),
        g.local_addr().unwrap()
    );
    format!("{demo}\n---\n{routes}")
}

fn frame(vni: u32, l4: L4Spec) -> Vec<u8> {
    let spec = FrameSpec {
        outer: None,
        vni,
        inner_src_mac: MAC_A,
        inner_dst_mac: MAC_B,
        src: "10.1.0.5".parse().unwrap(),
        dst: "10.2.0.9".parse().unwrap(),
        l4,
        payload_len: 64,
        payload_byte: 7,
    };
    let mut b = vec![0u8; 2048];
    let n = build(&spec, &mut b).unwrap();
    b.truncate(n);
    b
}

/// Receives on `s` until `want` datagrams came or 10 s passed; what came.
fn recv_n(s: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 2048];
    while out.len() < want && t0.elapsed() < Duration::from_secs(10) {
        if let Ok((k, _)) = s.recv_from(&mut buf) {
            out.push(buf[..k].to_vec());
        }
    }
    out
}

/// Packets in flight at most: traffic goes in windows, each sent once the previous one has
/// arrived (closed loop), so no socket buffer overflows however slow the machine is, and every
/// packet can be counted.
const WINDOW: usize = 10;

/// Sends `n` allowed and `n / 10` denied blue packets and `n` green ones, a window at a time;
/// returns what B and G got.
fn traffic(data: SocketAddr, b: &UdpSocket, g: &UdpSocket, n: usize) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (mut gb, mut gg) = (Vec::new(), Vec::new());
    for w in (0..n).step_by(WINDOW) {
        let k = WINDOW.min(n - w);
        for i in w..w + k {
            a.send_to(&frame(100, L4Spec::Udp { src_port: 4000, dst_port: 5001 }), data).unwrap();
            if i % 10 == 0 {
                a.send_to(&frame(100, L4Spec::Tcp { src_port: 4001, dst_port: 22, flags: 2 }), data).unwrap();
            }
            a.send_to(&frame(200, L4Spec::Udp { src_port: 4000, dst_port: 5001 }), data).unwrap();
        }
        gb.extend(recv_n(b, k));
        gg.extend(recv_n(g, k));
    }
    (gb, gg)
}

/// Polls the status until `ok` holds (10 s at most); the last status.
fn status_until(api: &str, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    status_within(api, Duration::from_secs(10), ok)
}

/// The status once `ok` holds, or the last one after `limit`.
fn status_within(api: &str, limit: Duration, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let (s, v) = http("GET", &format!("{api}/v1/status"), "");
        if (s == 200 && ok(&v)) || t0.elapsed() > limit {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tenant_stat(v: &serde_json::Value, name: &str, k: &str) -> u64 {
    v["tenants"].as_array().into_iter().flatten().find(|t| t["name"] == name).and_then(|t| t["stats"][k].as_u64()).unwrap_or(0)
}

#[test]
fn daemon_lifecycle() {
    let dir = std::env::temp_dir().join(format!("snic-daemon-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Removed when the test ends, pass or fail.
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Cleanup(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let g = UdpSocket::bind("127.0.0.1:0").unwrap();

    let d = start(&dir);
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &demo_with_routes(&b, &g));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["chains"], 2);
    // The health check a ToR's checker asks (`snic tor`): the data plane runs.
    let (s, v) = http("GET", &format!("{}/v1/health", d.api), "");
    assert_eq!((s, &v["healthy"]), (200, &serde_json::json!(true)), "{v}");

    let (gb, gg) = traffic(d.data, &b, &g, 200);
    assert_eq!(gb.len(), 200, "blue delivered");
    for p in &gb {
        let k = parse_inner(&p[8..]).unwrap().key;
        assert_eq!((k.src, k.dst_port), (IpAddr::from([203, 0, 113, 1]), 5001), "NATed and only port 5001");
    }
    assert_eq!(gg.len(), 200, "green delivered");
    assert!(gg.iter().all(|p| parse_vxlan(p).unwrap() == 300), "green re-mapped to VNI 300");

    // Rejections name object, field and reason with a stable code; nothing of them is applied.
    let (s, v) = http(
        "POST",
        &format!("{}/v1/apply", d.api),
        "apiVersion: snic/v1\nkind: DAG\nmetadata: {name: x}\nspec: {tenant: blue, nodes: [green/green-counter]}\n",
    );
    assert_eq!((s, v["error"]["code"].as_str()), (422, Some("unknown_reference")), "{v}");
    assert_eq!(v["error"]["field"], "spec.nodes[0]");
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), "{{{{ not yaml");
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("invalid_manifest")), "{v}");
    assert_eq!(oversized(&d.api), 413);
    let (s, v) = http("GET", &format!("{}/v1/objects/teapots", d.api), "");
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("not_found")));
    let (s, v) = http("GET", &format!("{}/v1/objects/dag", d.api), "");
    assert_eq!(s, 200);
    assert_eq!(v.as_array().unwrap().len(), 2, "the rejected DAG was not applied");

    // The data plane publishes its counters every 250 ms.
    let v = status_until(&d.api, |v| tenant_stat(v, "blue", "tx_packets") == 200 && v["fairness"]["epochs"].as_u64() > Some(0));
    let blue = v["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "blue").unwrap();
    assert_eq!(blue["stats"]["tx_packets"], 200, "{v}");
    assert_eq!(blue["stats"]["drops"][0][0], "firewall_deny");
    // The data plane published within the last 2 s (it does every 250 ms).
    assert_eq!(v["data_plane"]["up"], true, "{v}");
    assert!(v["data_plane"]["last_update_ms"].as_u64().unwrap() < 2000, "{v}");
    // Fair sharing runs: resources named after the manifest's NTs, demand measured, and a node
    // this lightly loaded grants everything and limits nobody.
    assert!(v["fairness"]["epochs"].as_u64().unwrap() > 0, "{v}");
    let res: Vec<&str> = v["fairness"]["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert!(res.starts_with(&["ingress", "egress", "store", "dispatcher"]) && res.contains(&"blue/blue-firewall"), "{res:?}");
    let fair = &blue["stats"]["fair"];
    assert_eq!((fair["fraction"].as_f64(), fair["limit_pps"].is_null()), (Some(1.0), true), "{fair}");
    assert_eq!(fair["demand"].as_array().unwrap().len(), res.len());
    let (s, m) = http("GET", &format!("{}/metrics", d.api), "");
    assert_eq!(s, 200);
    let m = m.as_str().unwrap().to_string();
    assert!(m.contains("snic_tenant_drops_total{tenant=\"blue\",reason=\"firewall_deny\"} 20"), "{m}");
    assert!(m.lines().any(|l| l == "snic_dataplane_up 1"), "{m}");
    assert!(m.contains("snic_nt_drops_total{nt=\"blue/blue-firewall\",region=\"0\"} 20"), "per-NT drops: {m}");
    assert!(m.contains("snic_nt_packets_total{nt=\"blue/blue-firewall\",region=\"0\"} 220"), "per-NT packets: {m}");
    assert!(m.contains("snic_resource_capacity{resource=\"blue/blue-firewall\"} 1.0"), "one instance: {m}");
    assert!(m.contains("snic_tenant_fair_fraction{tenant=\"blue\"} 1.0"), "{m}");
    assert!(m.contains("snic_tenant_demand{tenant=\"blue\",resource=\"ingress\"}"), "{m}");
    assert!(!m.contains("snic_tenant_ingress_limit_pps{"), "nobody limited: {m}");

    // Tenants, with their NTs and DAGs, come and go without rebuilding the node (issue 15:
    // applies cost what they change): the running chains, their NTs' state and the traffic
    // are untouched.
    let rebuilds = v["rebuilds"].as_u64().unwrap();
    let nat_port = |sport: u16| {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.send_to(&frame(100, L4Spec::Udp { src_port: sport, dst_port: 5001 }), d.data).unwrap();
        parse_inner(&recv_n(&b, 1)[0][8..]).unwrap().key.src_port
    };
    let first = nat_port(4000);
    let r = UdpSocket::bind("127.0.0.1:0").unwrap();
    let red = format!(
        "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: red}}\nspec: {{vnis: [400], weight: 2}}\n---\napiVersion: snic/v1\nkind: NT\nmetadata: {{name: red-counter}}\nspec: {{tenant: red, config: {{kind: counter}}}}\n---\napiVersion: snic/v1\nkind: DAG\nmetadata: {{name: red-dag}}\nspec: {{tenant: red, nodes: [red-counter]}}\n---\napiVersion: snic/v1\nkind: Rule\nmetadata: {{name: red-all}}\nspec: {{vni: 400, action: {{dag: red-dag}}}}\n---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: red-r}}\nspec: {{vni: 400, mac: '{MAC_B}', vtep: '{}'}}\n",
        r.local_addr().unwrap()
    );
    let (s, resp) = http("POST", &format!("{}/v1/apply", d.api), &red);
    assert_eq!((s, &resp["chains"]), (200, &serde_json::json!(3)), "{resp}");
    assert_eq!(burst(d.data, 400, &r, 20), 20, "red's chain, route and receive queue work at once");
    let red_region =
        |v: &serde_json::Value| v["regions"]["instances"].as_array().into_iter().flatten().any(|r| r["chain"][0] == "red/red-counter");
    let v = status_until(&d.api, |v| v["tenants"].as_array().unwrap().iter().any(|t| t["name"] == "red") && red_region(v));
    assert!(red_region(&v), "red's chain runs in a region of its own: {v}");
    assert_eq!(v["rebuilds"].as_u64(), Some(rebuilds), "a new tenant, chain and route are added in place: {v}");
    // Blue's NAT kept its mappings: a new flow gets another public port than the first flow
    // (a rebuilt NAT would hand out its first port again).
    assert_eq!(nat_port(4000), first, "an existing flow keeps its mapping");
    assert_ne!(nat_port(4002), first, "the NAT's state survived red's apply");
    assert_eq!(burst(d.data, 100, &b, 50), 50, "blue still forwarded");
    let v = status_until(&d.api, |v| tenant_stat(v, "blue", "tx_packets") == 253);
    assert_eq!(v["rebuilds"].as_u64(), Some(rebuilds), "{v}");
    for (kind, name) in [("route", "red-r"), ("rule", "red/red-all"), ("dag", "red/red-dag"), ("nt", "red/red-counter"), ("tenant", "red")]
    {
        let (s, resp) = http("DELETE", &format!("{}/v1/objects/{kind}/{name}", d.api), "");
        assert_eq!(s, 200, "{resp}");
    }
    let v = status_until(&d.api, |v| !v["tenants"].as_array().unwrap().iter().any(|t| t["name"] == "red") && !red_region(v));
    assert!(!red_region(&v), "red's chain stopped and its region went: {v}");
    assert_eq!(v["rebuilds"].as_u64(), Some(rebuilds), "removed in place too: {v}");
    assert_ne!(nat_port(4004), first, "blue's NAT state is still there");

    assert_eq!(stop(d), 0, "clean exit on SIGTERM");

    // Restart on the same state: the deployment comes back without re-applying.
    let d = start(&dir);
    let (gb, gg) = traffic(d.data, &b, &g, 100);
    assert_eq!((gb.len(), gg.len()), (100, 100), "after restart");
    let (_, v) = http("GET", &format!("{}/v1/objects/tenant/blue", d.api), "");
    assert_eq!(v["spec"]["vnis"][0], 100);
    // Only what was changed was written, deletions included: red is gone for good.
    let (s, _) = http("GET", &format!("{}/v1/objects/tenant/red", d.api), "");
    assert_eq!(s, 404, "a deleted tenant came back after a restart");
    let (_, v) = http("GET", &format!("{}/v1/objects/dag", d.api), "");
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(stop(d), 0);
}

/// The daemon tells what it does in its log (issue 16 item 7), as JSON lines with
/// `--log-format json`: start, state changes with where their time went, chains added, changes
/// refused, shutdown — and nothing per packet.
#[test]
fn the_daemon_logs_what_it_does_as_json_lines_and_nothing_per_packet() {
    let dir = std::env::temp_dir().join(format!("snic-daemon-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let g = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut d = launch(&dir, "", &["--log-format", "json", "--log", "info"], Stdio::piped());
    let err = d.child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(err).read_to_string(&mut s);
        s
    });
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &demo_with_routes(&b, &g));
    assert_eq!(s, 200, "{v}");
    let (gb, gg) = traffic(d.data, &b, &g, 200);
    assert_eq!((gb.len(), gg.len()), (200, 200));
    let (s, _) = http(
        "POST",
        &format!("{}/v1/apply", d.api),
        "apiVersion: snic/v1\nkind: DAG\nmetadata: {name: x}\nspec: {tenant: nobody, nodes: [y]}\n",
    );
    assert_eq!(s, 422);
    assert_eq!(stop(d), 0);
    let text = reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {l}"))).collect();
    let find = |m: &str| lines.iter().filter(|l| l["message"] == m).collect::<Vec<_>>();
    assert!(lines.iter().all(|l| l["level"].is_string() && l["timestamp"].is_string()), "{text}");
    assert_eq!(find("starting").len(), 1, "{text}");
    assert_eq!(find("serving").len(), 1, "{text}");
    let changed = find("state changed");
    assert_eq!(changed.len(), 1, "{text}");
    assert!(changed[0]["deploy_ms"].is_number() && changed[0]["validate_ms"].is_number(), "{text}");
    assert_eq!(changed[0]["chains"], 2);
    let added: Vec<&str> = find("chain added").iter().map(|l| l["chain"].as_str().unwrap()).collect();
    assert_eq!(added, ["blue/blue-firewall → blue/blue-nat", "green/green-counter → green/green-vpc-map"], "{text}");
    assert_eq!(find("change refused").len(), 1, "{text}");
    assert_eq!(find("shutting down").len(), 1, "{text}");
    // 620 packets went through: a line per packet would show.
    assert!(lines.len() < 20, "{} log lines: {text}", lines.len());
}

/// Hostile and careless requests: each is refused with its stable code, changes nothing, costs
/// no memory worth speaking of, and the next request is served.
#[test]
fn hostile_requests_are_refused_and_the_node_keeps_serving() {
    let dir = TempDir::new("hostile");
    let d = start_with(&dir.0, "api_body_timeout_ms: 500\n");
    let (b, g) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
    let apply = format!("{}/v1/apply", d.api);
    let (s, v) = http("POST", &apply, &demo_with_routes(&b, &g));
    assert_eq!(s, 200, "{v}");
    let objects = |d: &Daemon| ["tenant", "nt", "dag", "rule", "route"].map(|k| http("GET", &format!("{}/v1/objects/{k}", d.api), "").1);
    let before = objects(&d);
    let rss0 = peak_rss_kib(d.child.id());

    let nt = |cfg: &str| format!("apiVersion: snic/v1\nkind: NT\nmetadata: {{name: evil}}\nspec: {{tenant: blue, config: {cfg}}}\n");
    let mut bad: Vec<(String, &str, &str)> = vec![
        // Sizes far beyond memory, and near u64::MAX: refused before anything is allocated.
        (nt("{kind: firewall, flow_cache: 18446744073709551615}"), "invalid_manifest", "spec.config.flow_cache"),
        (nt("{kind: firewall, flow_cache: 100000000000}"), "invalid_manifest", "spec.config.flow_cache"),
        (nt("{kind: nat, max_flows: 18446744073709551615}"), "invalid_manifest", "spec.config.max_flows"),
        (nt("{kind: aes_gcm, direction: decrypt, keys: [], max_senders: 10000000000}"), "invalid_manifest", "spec.config.max_senders"),
        // Nonsense.
        (nt("{kind: firewall, rules: [{src_ports: {lo: 9, hi: 1}, action: deny}]}"), "invalid_manifest", "spec.config.rules[0].src_ports"),
        (
            nt("{kind: nat, snat: {inside: 10.0.0.0/8, public: 1.2.3.4, ports: {lo: 0, hi: 0}}}"),
            "invalid_manifest",
            "spec.config.snat.ports",
        ),
        (
            nt("{kind: nat, dnat: [{public: 1.2.3.4, proto: 6, port: 80, to: 10.0.0.1, to_port: 0}]}"),
            "invalid_manifest",
            "spec.config.dnat[0].to_port",
        ),
        (nt("{kind: synthetic, cost_ns: 1000000000000000}"), "invalid_manifest", "spec.config.cost_ns"),
        (
            "apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: q}\nspec: {quotas: {store_buffers: 0}}\n".into(),
            "invalid_manifest",
            "spec.quotas.store_buffers",
        ),
        (
            "apiVersion: snic/v1\nkind: Rule\nmetadata: {name: r}\nspec: {vni: 100, dst_ports: {lo: 9, hi: 1}, action: drop}\n".into(),
            "invalid_manifest",
            "spec.dst_ports",
        ),
    ];
    // Deep nesting, flow and block, about 600 KB: refused where the depth limit is crossed.
    bad.push(("{a: [".repeat(120_000), "invalid_manifest", ""));
    bad.push(("[".repeat(600_000), "invalid_manifest", ""));
    bad.push(("- ".repeat(300_000), "invalid_manifest", ""));
    // An alias bomb.
    let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
    for (p, n) in ["a", "b", "c", "d", "e", "f", "g"].windows(2).map(|w| (w[0], w[1])) {
        bomb += &format!("{n}: &{n} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n");
    }
    bad.push((bomb, "invalid_manifest", ""));
    for (body, code, field) in &bad {
        let (s, v) = http("POST", &apply, body);
        assert_eq!((s, v["error"]["code"].as_str()), (400, Some(*code)), "{}: {v}", &body[..body.len().min(80)]);
        if !field.is_empty() {
            assert_eq!(v["error"]["field"], *field, "{v}");
        }
        assert!(!v["error"]["reason"].as_str().unwrap_or("").is_empty(), "{v}");
    }

    // Only manifest content types: a form or text/plain (what a web page may post without
    // asking) and no type at all get 415.
    let addr = d.api.trim_start_matches("http://").to_string();
    let doc = "apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: sneaky}\nspec: {}\n";
    for ct in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""] {
        let h = if ct.is_empty() { String::new() } else { format!("Content-Type: {ct}\r\n") };
        let req = format!("POST /v1/apply HTTP/1.1\r\nHost: {addr}\r\n{h}Content-Length: {}\r\nConnection: close\r\n\r\n{doc}", doc.len());
        let (s, v) = raw(&d.api, req.as_bytes());
        assert_eq!((s, v["error"]["code"].as_str()), (415, Some("unsupported_media_type")), "{ct:?}: {v}");
    }
    // Not UTF-8.
    let mut req = format!(
        "POST /v1/apply HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/yaml\r\nContent-Length: 4\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    req.extend_from_slice(&[0xff, 0xfe, 0x00, 0x80]);
    let (s, v) = raw(&d.api, &req);
    assert_eq!((s, v["error"]["code"].as_str()), (400, Some("invalid_manifest")), "{v}");
    // A body that stops arriving is timed out (500 ms here) with 408.
    let req = format!(
        "POST /v1/apply HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/yaml\r\nContent-Length: 1000\r\n\r\napiVersion: snic/v1\n"
    );
    let (s, v) = raw(&d.api, req.as_bytes());
    assert_eq!((s, v["error"]["code"].as_str()), (408, Some("request_timeout")), "{v}");
    // Wrong method, unknown path: JSON errors too.
    let (s, v) =
        raw(&d.api, format!("PUT /v1/apply HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes());
    assert_eq!((s, v["error"]["code"].as_str()), (405, Some("method_not_allowed")), "{v}");
    let (s, v) = raw(&d.api, format!("GET /nope HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes());
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("not_found")), "{v}");

    // Nothing changed, the node serves the next requests and still forwards.
    assert_eq!(objects(&d), before, "state unchanged");
    let (s, _) = http("GET", &format!("{}/v1/status", d.api), "");
    assert_eq!(s, 200);
    let (s, m) = http("GET", &format!("{}/metrics", d.api), "");
    assert!(s == 200 && m.as_str().unwrap().contains("snic_dataplane_up 1"));
    let (gb, gg) = traffic(d.data, &b, &g, 50);
    assert_eq!((gb.len(), gg.len()), (50, 50));
    let (s, v) = http("POST", &apply, doc);
    assert_eq!(s, 200, "a good apply after all that: {v}");
    // Bounded memory: the refused requests cost their bodies and parse state, not the tables
    // they asked for (a 10^11-slot flow cache alone would be terabytes).
    let grown = peak_rss_kib(d.child.id()).saturating_sub(rss0);
    assert!(grown < 256 * 1024, "peak RSS grew by {grown} KiB");
    assert_eq!(stop(d), 0);
}

/// A frame on `vni` from inner `src` to inner `dst` (UDP to port 5001, which blue allows).
fn frame_macs(vni: u32, src: MacAddr, dst: MacAddr) -> Vec<u8> {
    let mut f = frame(vni, L4Spec::Udp { src_port: 4000, dst_port: 5001 });
    f[8..14].copy_from_slice(&dst.0);
    f[14..20].copy_from_slice(&src.0);
    f
}

/// A host that reaches the data port but is not one of the tenant's VTEPs (127.0.0.2; the
/// tenant's Routes are on 127.0.0.1) sends on the tenant's VNI with its endpoint's MAC: nothing
/// of it is processed or learned, the forwarding entry keeps pointing at the endpoint, and the
/// drops are counted as `foreign_vtep`.
#[test]
fn a_foreign_vtep_cannot_take_over_an_endpoints_traffic() {
    let dir = TempDir::new("spoof");
    let d = start(&dir.0);
    let (b, g) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &demo_with_routes(&b, &g));
    assert_eq!(s, 200, "{v}");
    // The victim endpoint (MAC_A) talks to B: the node learns MAC_A behind it.
    let victim = UdpSocket::bind("127.0.0.1:0").unwrap();
    victim.send_to(&frame_macs(100, MAC_A, MAC_B), d.data).unwrap();
    assert_eq!(recv_n(&b, 1).len(), 1, "the victim reaches B");
    // The attacker claims MAC_A from another address.
    let attacker = UdpSocket::bind("127.0.0.2:0").unwrap();
    for _ in 0..20 {
        attacker.send_to(&frame_macs(100, MAC_A, MAC_B), d.data).unwrap();
    }
    let v = status_until(&d.api, |v| {
        let blue = v["tenants"].as_array().into_iter().flatten().find(|t| t["name"] == "blue");
        blue.is_some_and(|t| t["stats"]["drops"].as_array().into_iter().flatten().any(|d| d[0] == "foreign_vtep" && d[1] == 20))
    });
    let blue = v["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "blue").unwrap();
    let drops = blue["stats"]["drops"].as_array().unwrap();
    assert!(drops.iter().any(|d| d[0] == "foreign_vtep" && d[1] == 20), "{drops:?}");
    assert_eq!(blue["stats"]["rx_packets"], 1, "none of the attacker's frames was admitted: {blue}");
    // The node has handled all 20 (counted above), in order: a marker the victim sends now is
    // the next thing B gets, with nothing of the attacker's before it.
    let mut marker = frame_macs(100, MAC_A, MAC_B);
    *marker.last_mut().unwrap() = 0x5a;
    victim.send_to(&marker, d.data).unwrap();
    let next = recv_n(&b, 1);
    assert_eq!(next.len(), 1, "the victim's marker reaches B");
    assert_eq!(next[0].last(), Some(&0x5a), "nothing of the attacker reached B before it");
    // B answers the victim: it goes to the victim (one copy, one peer), not to the attacker.
    b.send_to(&frame_macs(100, MAC_B, MAC_A), d.data).unwrap();
    assert_eq!(recv_n(&victim, 1).len(), 1, "the victim still gets its traffic");
    attacker.set_nonblocking(true).unwrap();
    assert!(attacker.recv_from(&mut [0u8; 2048]).is_err(), "the attacker got nothing");
    assert_eq!(stop(d), 0);
}

/// A temporary directory removed when the test ends, pass or fail.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("snic-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sends `n` packets of `vni`, a window at a time, and returns how many `rx` got.
fn burst(data: SocketAddr, vni: u32, rx: &UdpSocket, n: usize) -> usize {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut got = 0;
    for w in (0..n).step_by(WINDOW) {
        let k = WINDOW.min(n - w);
        for _ in 0..k {
            a.send_to(&frame(vni, L4Spec::Udp { src_port: 4000, dst_port: 5001 }), data).unwrap();
        }
        got += recv_n(rx, k).len();
    }
    got
}

/// An elastic counter from the status (0 if absent).
fn counter(v: &serde_json::Value, name: &str) -> u64 {
    v["elastic"]["counters"].as_array().into_iter().flatten().find(|c| c[0] == name).and_then(|c| c[1].as_u64()).unwrap_or(0)
}

#[test]
fn elastic_node_context_switches_between_tenants_on_one_region() {
    // One region, two tenants' chains, a 2 ms emulated launch: the second chain is launched on
    // demand by stop-and-launch, and each tenant's traffic brings its chain back.
    let dir = TempDir::new("elastic");
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let g = UdpSocket::bind("127.0.0.1:0").unwrap();
    let d = start_with(&dir.0, "regions: 1\nelastic: {enabled: true, launch_delay_ms: 2}\n");
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &demo_with_routes(&b, &g));
    assert_eq!(s, 200, "two chains on one region are accepted with elastic NTs: {v}");
    for round in 0..2 {
        assert_eq!(burst(d.data, 100, &b, 100), 100, "round {round}: blue delivered");
        assert_eq!(burst(d.data, 200, &g, 100), 100, "round {round}: green delivered");
    }
    let v = status_until(&d.api, |v| v["elastic"]["counters"].is_array() && counter(v, "context_switches") >= 3);
    assert_eq!(v["elastic"]["enabled"], true);
    assert_eq!(counter(&v, "prelaunches"), 1, "{v}");
    // Green takes the region from blue, then each takes it back in turn (or resumes a victim).
    assert!(counter(&v, "context_switches") >= 3, "{}", v["elastic"]);
    let events: Vec<&str> = v["elastic"]["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert!(events.iter().any(|e| e.starts_with("context switch")), "{events:?}");
    assert!(events.contains(&"running (contextswitch)"), "{events:?}");
    let (_, m) = http("GET", &format!("{}/metrics", d.api), "");
    assert!(m.as_str().unwrap().contains("snic_elastic_events_total{event=\"context_switches\"}"), "{m}");
    assert_eq!(stop(d), 0);
}

#[test]
fn elastic_config_errors_are_clear() {
    let dir = TempDir::new("elastic-cfg");
    let cfg = dir.0.join("node.yaml");
    std::fs::write(&cfg, "elastic: {autoscale: true}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["run", "--config", cfg.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("elastic.autoscale needs elastic.enabled"), "{err}");
}

#[test]
fn pool_config_errors_are_clear() {
    let dir = TempDir::new("pool-cfg");
    let (cfg, key) = (dir.0.join("node.yaml"), dir.0.join("short.key"));
    std::fs::write(&key, "too short\n").unwrap();
    let run = |yaml: String| {
        std::fs::write(&cfg, format!("api: 127.0.0.1:0\ndata: 127.0.0.1:0\nstate_dir: {}\n{yaml}", dir.0.join("state").display())).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["run", "--config", cfg.to_str().unwrap()]).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = run(format!("pool: {{listen: 0.0.0.0:7946, secret_file: {}}}\n", key.display()));
    assert!(err.contains("pool.listen must be an address peers can reach"), "{err}");
    let err = run(format!("pool: {{listen: 127.0.0.1:0, secret_file: {}}}\n", key.display()));
    assert!(err.contains("the secret must be at least 16 bytes"), "{err}");
    let err = run("pool: {listen: 127.0.0.1:0, secret_file: /nonexistent/pool.key}\n".into());
    assert!(err.contains("reading pool.secret_file /nonexistent/pool.key"), "{err}");
}

#[test]
fn elastic_node_compacts_a_parallel_dag_when_regions_are_short_and_expands_it_after() {
    // Green's counter and VPC map run in parallel (two chains of their own) and blue's firewall
    // and NAT as one chain: three chains, two regions. With both tenants sending, green's DAG
    // becomes one compact chain; once blue stops, green goes back to its parallel chains. (How
    // often and exactly when the node switches is the rechaining policy's, checked on a
    // virtual clock in crates/dataplane/tests/elastic.rs; here: the daemon does it, and every
    // packet goes through its tenant's NTs.)
    let dir = TempDir::new("rechain");
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let g = UdpSocket::bind("127.0.0.1:0").unwrap();
    let d = start_with(&dir.0, "regions: 2\nelastic: {enabled: true, launch_delay_ms: 2}\n");
    let manifest = demo_with_routes(&b, &g).replace(
        "  nodes: [green-counter, green-vpc-map]\n  edges: [[green-counter, green-vpc-map]]",
        "  nodes: [green-counter, green-vpc-map]\n  edges: []\n  parallel: true",
    );
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &manifest);
    assert_eq!(s, 200, "{v}");
    let events = |v: &serde_json::Value| -> Vec<String> {
        v["elastic"]["events"].as_array().into_iter().flatten().filter_map(|e| e["event"].as_str().map(str::to_string)).collect()
    };
    let (blue, green) = traffic(d.data, &b, &g, 3000);
    let v = status_until(&d.api, |v| events(v).iter().any(|e| e == "DAG green/green-vpc runs its compact form"));
    assert!(counter(&v, "region_shortfalls") > 0, "{}", v["elastic"]);
    assert!(events(&v).iter().any(|e| e == "DAG green/green-vpc runs its compact form"), "{}", v["elastic"]);
    // Both tenants' traffic went through their NTs: blue's NAT and green's VPC map ran.
    assert_eq!((blue.len(), green.len()), (3000, 3000), "delivered: {} {}", v["tenants"], v["elastic"]);
    assert!(green.iter().all(|p| u32::from_be_bytes([0, p[4], p[5], p[6]]) == 300), "green re-mapped to VNI 300");
    assert!(blue.iter().all(|p| p[34..38] == [203, 0, 113, 1]), "blue's source NATed to 203.0.113.1");
    // Blue stops: its chain goes idle, then green expands into the regions it leaves.
    let v = status_until(&d.api, |v| events(v).iter().any(|e| e == "DAG green/green-vpc runs its planned form"));
    assert!(events(&v).iter().any(|e| e == "DAG green/green-vpc runs its planned form"), "{:?}", events(&v));
    assert_eq!(burst(d.data, 200, &g, 100), 100, "green's planned form delivers");
    assert_eq!(stop(d), 0);
}

#[test]
fn a_plan_whose_vnis_cannot_be_steered_is_refused_and_the_node_keeps_forwarding() {
    // Each VNI takes two instructions of the steering program (at most 4096): 2100 VNIs for one
    // tenant do not fit. The apply is refused and the previous plan stays on the socket.
    let dir = TempDir::new("steer");
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let g = UdpSocket::bind("127.0.0.1:0").unwrap();
    let d = start_with(&dir.0, "");
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &demo_with_routes(&b, &g));
    assert_eq!(s, 200, "{v}");
    let vnis: Vec<String> = (10_000..12_100).map(|v| v.to_string()).collect();
    let big = format!("apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: big}}\nspec: {{vnis: [{}]}}\n", vnis.join(", "));
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &big);
    assert_ne!(s, 200, "{v}");
    assert!(v.to_string().contains("steering"), "{v}");
    assert_eq!(burst(d.data, 100, &b, 50), 50, "blue still forwarded");
    let (_, st) = http("GET", &format!("{}/v1/status", d.api), "");
    assert_eq!(st["data_plane"]["up"], true, "{st}");
    assert_eq!(stop(d), 0);
}

#[test]
fn a_short_chain_moves_off_the_worker_it_shares_with_a_long_one() {
    // One worker thread: both tenants' chains are launched on it. Green's counter is replaced by
    // a 200 µs synthetic NT, so its chain is long (far beyond 10× blue's firewall → NAT, even in
    // a debug build on a loaded machine); the node moves blue's chain to the data-plane thread
    // while both send, and forwards everything.
    let dir = TempDir::new("placement");
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let g = UdpSocket::bind("127.0.0.1:0").unwrap();
    let d = start_with(&dir.0, "workers: 1\n");
    let manifest = demo_with_routes(&b, &g).replace("  config: {kind: counter}", "  config: {kind: synthetic, cost_ns: 200000}");
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &manifest);
    assert_eq!(s, 200, "{v}");
    let moved = |v: &serde_json::Value| {
        v["elastic"]["events"].as_array().into_iter().flatten().any(|e| {
            let ev = e["event"].as_str().unwrap_or_default();
            e["chain"].as_str().unwrap_or_default().starts_with("blue")
                && ev.starts_with("instance ")
                && ev.ends_with(" moved to the data-plane thread")
        })
    };
    // Windows of 20 blue and 2 green packets until the move, then 20 windows more (60 s at
    // most: the move takes three 10 ms looks once both chains' costs are measured).
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (mut sent_b, mut sent_g, mut got_b, mut got_g) = (0, 0, 0, 0);
    let (mut after, mut windows) = (None, 0u64);
    let t0 = Instant::now();
    while after.is_none_or(|w| windows < w + 20) && t0.elapsed() < Duration::from_secs(60) {
        for _ in 0..20 {
            a.send_to(&frame(100, L4Spec::Udp { src_port: 4000 + (sent_b % 4) as u16, dst_port: 5001 }), d.data).unwrap();
            sent_b += 1;
        }
        for _ in 0..2 {
            a.send_to(&frame(200, L4Spec::Udp { src_port: 4000, dst_port: 5001 }), d.data).unwrap();
            sent_g += 1;
        }
        got_b += recv_n(&b, 20).len();
        got_g += recv_n(&g, 2).len();
        windows += 1;
        if after.is_none() && windows % 10 == 0 && moved(&http("GET", &format!("{}/v1/status", d.api), "").1) {
            after = Some(windows);
        }
    }
    let v = status_until(&d.api, |v| moved(v));
    assert!(moved(&v), "{}", v["elastic"]);
    assert_eq!(counter(&v, "moves"), 1, "one move, no thrash: {}", v["elastic"]);
    // Status says where each chain runs, as JSON and in the text `snic status` prints.
    let place = |tenant: &str| {
        let rs = v["regions"]["instances"].as_array().unwrap();
        let r = rs.iter().find(|r| r["chain"][0].as_str().unwrap().starts_with(tenant)).unwrap_or_else(|| panic!("{rs:?}"));
        r["place"].as_str().unwrap().to_string()
    };
    assert_eq!(place("blue"), "the data-plane thread");
    assert_eq!(place("green"), "worker 0");
    let text = Command::new(env!("CARGO_BIN_EXE_snic")).args(["status", "--server", &d.api]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("on worker 0") && text.contains("moves 1") && text.contains("moved to the data-plane thread"), "{text}");
    // Nothing lost while the region moved.
    assert_eq!((got_b, got_g), (sent_b, sent_g), "delivered (blue, green) of sent");
    assert_eq!(stop(d), 0);
}

#[test]
fn fairness_config_errors_are_clear() {
    let dir = TempDir::new("fair-cfg");
    let cfg = dir.0.join("node.yaml");
    for (yaml, err) in [
        ("fairness: {core_target: 1.5}\n", "fairness.core_target must be in (0, 1]"),
        ("fairness: {core_target: 0}\n", "fairness.core_target must be in (0, 1]"),
        ("fairness: {smoothing: 0}\n", "fairness.smoothing must be in (0, 1]"),
    ] {
        std::fs::write(&cfg, yaml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["run", "--config", cfg.to_str().unwrap()]).output().unwrap();
        assert!(!out.status.success(), "{yaml}");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(text.contains(err), "{yaml}: {text}");
    }
}

/// Writes a pool secret into `dir`; the node.yaml `pool:` section of a member on loopback with
/// that secret and the given seeds.
fn pool_section(dir: &std::path::Path) -> impl Fn(&str) -> String {
    let secret = dir.join("pool.key");
    std::fs::write(&secret, "a pool secret of 32 characters..\n").unwrap();
    move |seeds: &str| format!("pool:\n  listen: 127.0.0.1:0\n  secret_file: {}\n  seeds: [{seeds}]\n", secret.display())
}

fn pool_members(v: &serde_json::Value) -> Vec<String> {
    v["pool"]["members"].as_array().into_iter().flatten().filter_map(|m| m["addr"].as_str().map(String::from)).collect()
}

/// Three daemons on loopback form a pool through one seed and exchange load reports; what is
/// not a pool datagram, or not sealed with the pool's secret, is dropped and counted; a node
/// killed with SIGKILL is seen down by the others. (Limits are generous bounds on a loaded
/// machine, not the figures: `snic sim scenarios/pool-membership.toml` measures those.)
#[test]
fn three_daemons_form_a_pool_refuse_strangers_and_see_a_killed_one_down() {
    let dirs: Vec<TempDir> = (0..3).map(|i| TempDir::new(&format!("pool{i}"))).collect();
    let section = pool_section(&dirs[0].0);
    let a = start_with(&dirs[0].0, &section(""));
    let seed = a.pool.expect("node A's pool address").to_string();
    let b = start_with(&dirs[1].0, &section(&seed));
    let mut c = start_with(&dirs[2].0, &section(&seed));
    let formed = |v: &serde_json::Value| {
        let m = v["pool"]["members"].as_array().cloned().unwrap_or_default();
        m.len() == 2 && m.iter().all(|m| m["report_age_ms"].is_u64() && m["free_regions"].is_u64())
    };
    for d in [&a, &b, &c] {
        let v = status_within(&d.api, Duration::from_secs(30), formed);
        assert!(formed(&v), "{}", v["pool"]);
    }
    // A deploys the demo's chains: its reports carry each running chain's spare capacity.
    let (st, v) = http("POST", &format!("{}/v1/apply", a.api), include_str!("../../../examples/demo.yaml"));
    assert_eq!(st, 200, "{v}");
    let pool_a_s = a.pool.unwrap().to_string();
    let spare = |v: &serde_json::Value| {
        let m = v["pool"]["members"].as_array().cloned().unwrap_or_default();
        m.iter().any(|m| m["addr"] == pool_a_s.as_str() && m["chains"].as_array().is_some_and(|c| !c.is_empty()))
    };
    let v = status_within(&b.api, Duration::from_secs(30), spare);
    assert!(spare(&v), "{}", v["pool"]);
    // Strangers: garbage, and a datagram that looks like the pool's but is not sealed with its
    // secret.
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let pool_a = a.pool.unwrap();
    s.send_to(b"hello", pool_a).unwrap();
    let mut forged = b"SNP\x04\x01".to_vec();
    forged.extend_from_slice(&[7u8; 60]);
    s.send_to(&forged, pool_a).unwrap();
    // A datagram sealed with the pool's secret in a version no node speaks (the pool protocol's
    // frame, snic_core::pool::message::Header): refused for its version.
    let mut future = Vec::new();
    snic_core::pool::message::Header { version: snic_core::pool::message::NEWEST + 1, kind: 1, gen: 1, counter: 1 }.write(&mut future);
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"a pool secret of 32 characters..");
    let tag = ring::hmac::sign(&key, &future);
    future.extend_from_slice(tag.as_ref());
    s.send_to(&future, pool_a).unwrap();
    let refused = |v: &serde_json::Value| {
        v["pool"]["refused_malformed"].as_u64() >= Some(1)
            && v["pool"]["refused_unauthenticated"].as_u64() >= Some(1)
            && v["pool"]["refused_version"].as_u64() >= Some(1)
    };
    let v = status_within(&a.api, Duration::from_secs(30), refused);
    assert!(refused(&v), "{}", v["pool"]);
    assert_eq!(pool_members(&v).len(), 2, "strangers do not join");
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let m = agent.get(format!("{}/metrics", a.api)).call().unwrap().body_mut().read_to_string().unwrap();
    assert!(m.contains("snic_pool_members 2"), "{m}");
    assert!(m.contains(r#"snic_pool_datagrams_total{direction="dropped",reason="unauthenticated"} 1"#), "{m}");
    assert!(m.contains(r#"snic_pool_datagrams_total{direction="dropped",reason="version"} 1"#), "{m}");
    // C dies without a word.
    let pool_c = c.pool.unwrap().to_string();
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    let gone = |v: &serde_json::Value| {
        let down = v["pool"]["events"].as_array().into_iter().flatten().any(|e| e[1] == "down" && e[2] == pool_c.as_str());
        down && !pool_members(v).contains(&pool_c)
    };
    for d in [&a, &b] {
        let v = status_within(&d.api, Duration::from_secs(30), gone);
        assert!(gone(&v), "{}", v["pool"]);
    }
    assert_eq!(stop(a), 0);
    assert_eq!(stop(b), 0);
}

/// Remote launch and redirect between two daemons: A asks B to host tenant blue's DAG (`POST
/// /v1/pool/place`); blue's packets sent to A then run on B — the firewall and SNAT there — and
/// reach blue's receiver from B's data socket, while green's stay at A. Placing on a node that
/// is not a member, or a DAG that does not exist, is refused with a clear error. B killed: A
/// serves blue itself again.
#[test]
fn a_dag_placed_on_a_peer_runs_there_and_comes_home_when_the_peer_dies() {
    let dirs: Vec<TempDir> = (0..2).map(|i| TempDir::new(&format!("place{i}"))).collect();
    let section = pool_section(&dirs[0].0);
    let a = start_with(&dirs[0].0, &section(""));
    let b = start_with(&dirs[1].0, &section(&a.pool.unwrap().to_string()));
    for d in [&a, &b] {
        let v = status_within(&d.api, Duration::from_secs(30), |v| pool_members(v).len() == 1);
        assert_eq!(pool_members(&v).len(), 1, "{}", v["pool"]);
    }
    let (rb, rg) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
    let (st, v) = http("POST", &format!("{}/v1/apply", a.api), &demo_with_routes(&rb, &rg));
    assert_eq!(st, 200, "{v}");
    let place =
        |dag: &str, peer: &str| http("POST", &format!("{}/v1/pool/place", a.api), &format!(r#"{{"dag": "{dag}", "peer": "{peer}"}}"#));
    let (st, v) = place("nope", &b.pool.unwrap().to_string());
    assert_eq!((st, v["error"]["code"].as_str()), (404, Some("not_found")), "{v}");
    let (st, v) = place("blue/blue-edge", "127.0.0.1:9");
    assert_eq!((st, v["error"]["code"].as_str()), (502, Some("peer_refused")), "{v}");
    assert!(v["error"]["reason"].as_str().unwrap().contains("not a member"), "{v}");
    let (st, v) = place("blue/blue-edge", &b.pool.unwrap().to_string());
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["placed"]["data"], b.data.to_string().as_str(), "{v}");
    // Blue's packets: to A, run on B, delivered from B with B's SNAT; green's stay at A.
    let (gb, gg) = traffic(a.data, &rb, &rg, 50);
    assert_eq!((gb.len(), gg.len()), (50, 50));
    for d in &gb {
        let k = snic_wire::layout::parse_inner(&d[8..]).unwrap().key;
        assert_eq!(k.src, std::net::IpAddr::from([203, 0, 113, 1]), "SNAT ran");
        assert_eq!(k.dst_port, 5001, "the firewall (on B) dropped port 22");
    }
    let from_b = |s: &UdpSocket| {
        let frame = frame(100, L4Spec::Udp { src_port: 4000, dst_port: 5001 });
        UdpSocket::bind("127.0.0.1:0").unwrap().send_to(&frame, a.data).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 2048];
        s.recv_from(&mut buf).map(|(_, from)| from).unwrap()
    };
    assert_eq!(from_b(&rb), b.data, "delivered by the peer");
    let hosted = |v: &serde_json::Value| v["hosted"][0]["packets"].as_u64() == Some(56);
    let vb = status_within(&b.api, Duration::from_secs(10), hosted);
    assert!(hosted(&vb), "{}", vb["hosted"]);
    assert_eq!((vb["hosted"][0]["tenant"].as_str(), vb["hosted"][0]["dag"].as_str()), (Some("blue"), Some("blue/blue-edge")));
    assert_eq!(vb["pool"]["launches_hosted"], 1);
    let sent = |v: &serde_json::Value| v["redirects"][0]["packets"].as_u64() == Some(56);
    let va = status_within(&a.api, Duration::from_secs(10), sent);
    assert!(sent(&va), "{}", va["redirects"]);
    assert_eq!(va["redirects"][0]["peer"], b.data.to_string().as_str());
    // B is killed and started again at once on the same addresses, faster than A's failure
    // detection (issue 49): A tells the new B from the one it knew by its generation, and blue,
    // whose DAG the new B does not host, runs at A again — it is not sent, for good, numbers
    // the new B never gave.
    let (b_data, b_pool) = (b.data, b.pool.unwrap());
    let mut b = b;
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let again = section(&a.pool.unwrap().to_string()).replace("listen: 127.0.0.1:0", &format!("listen: {b_pool}"));
    let b = launch(&dirs[1].0, &again, &["--data", &b_data.to_string()], Stdio::inherit());
    assert_eq!((b.data, b.pool), (b_data, Some(b_pool)));
    let b_pool_s = b_pool.to_string();
    let restarted = |v: &serde_json::Value| {
        let seen = v["pool"]["events"].as_array().into_iter().flatten().any(|e| e[1] == "restarted" && e[2] == b_pool_s.as_str());
        seen && v["redirects"].as_array().is_some_and(|r| r.is_empty())
    };
    let va = status_within(&a.api, Duration::from_secs(30), restarted);
    assert!(restarted(&va), "{} {}", va["pool"], va["redirects"]);
    assert_eq!(from_b(&rb), a.data, "served at home again after B's restart");
    // B dies hosting nothing: A sees it down.
    let mut b = b;
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let home = |v: &serde_json::Value| v["redirects"].as_array().is_some_and(|r| r.is_empty());
    let va = status_within(&a.api, Duration::from_secs(30), home);
    assert!(home(&va), "{}", va["redirects"]);
    assert_eq!(from_b(&rb), a.data, "served at home again");
    assert_eq!(stop(a), 0);
}

/// The intermediate topology (paper §5): three daemons whose `pool.links` are a line A – B – C.
/// A places blue's DAG on C, which it has no link to: blue's packets go to B, which passes them
/// on without running anything and counts them (status and `/metrics`), and C runs the chain
/// and delivers. Gossip and the launch itself go straight between members; only the data path
/// follows the links.
#[test]
fn a_redirect_to_a_peer_without_a_link_crosses_the_node_between() {
    let dirs: Vec<TempDir> = (0..3).map(|i| TempDir::new(&format!("line{i}"))).collect();
    let secret = dirs[0].0.join("pool.key");
    std::fs::write(
        &secret,
        "a pool secret of 32 characters..
",
    )
    .unwrap();
    // Fixed pool addresses (the links name them), each on its own loopback address.
    let addr = |i: usize| format!("127.0.77.{}:7946", i + 1);
    let section = |i: usize| {
        format!(
            "pool:\n  listen: {}\n  secret_file: {}\n  seeds: [{}]\n  links: [[{}, {}], [{}, {}]]\n",
            addr(i),
            secret.display(),
            addr(0),
            addr(0),
            addr(1),
            addr(1),
            addr(2)
        )
    };
    let nodes: Vec<Daemon> = (0..3).map(|i| start_with(&dirs[i].0, &section(i))).collect();
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    let formed = |v: &serde_json::Value| {
        let m = v["pool"]["members"].as_array().cloned().unwrap_or_default();
        m.len() == 2 && m.iter().all(|m| m["report_age_ms"].is_u64())
    };
    for d in [a, b, c] {
        let v = status_within(&d.api, Duration::from_secs(30), formed);
        assert!(formed(&v), "{}", v["pool"]);
    }
    let (rb, rg) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
    let (st, v) = http("POST", &format!("{}/v1/apply", a.api), &demo_with_routes(&rb, &rg));
    assert_eq!(st, 200, "{v}");
    let (st, v) = http("POST", &format!("{}/v1/pool/place", a.api), &format!(r#"{{"dag": "blue/blue-edge", "peer": "{}"}}"#, addr(2)));
    assert_eq!(st, 200, "{v}");
    let va = status_until(&a.api, |v| v["redirects"][0]["via"] == b.data.to_string().as_str());
    assert_eq!(
        (va["redirects"][0]["peer"].as_str(), va["redirects"][0]["via"].as_str()),
        (Some(c.data.to_string().as_str()), Some(b.data.to_string().as_str())),
        "{}",
        va["redirects"]
    );
    let (gb, gg) = traffic(a.data, &rb, &rg, 50);
    assert_eq!((gb.len(), gg.len()), (50, 50));
    for d in &gb {
        let k = snic_wire::layout::parse_inner(&d[8..]).unwrap().key;
        assert_eq!((k.src, k.dst_port), (IpAddr::from([203, 0, 113, 1]), 5001), "C's firewall and SNAT ran");
    }
    // 50 to port 5001, 5 to port 22 (dropped by the firewall on C): 55 crossed B.
    let passed = |v: &serde_json::Value| v["pass_through"]["packets"].as_u64() == Some(55);
    let vb = status_until(&b.api, passed);
    assert!(passed(&vb), "{}", vb["pass_through"]);
    assert!(vb["hosted"].as_array().is_some_and(|h| h.is_empty()), "B runs none of it: {}", vb["hosted"]);
    let vc = status_until(&c.api, |v| v["hosted"][0]["packets"].as_u64() == Some(55));
    assert_eq!(vc["hosted"][0]["packets"].as_u64(), Some(55), "{}", vc["hosted"]);
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let m = agent.get(format!("{}/metrics", b.api)).call().unwrap().body_mut().read_to_string().unwrap();
    assert!(m.contains(r#"snic_pass_through_total{unit="packets"} 55"#), "{m}");
    for d in nodes {
        assert_eq!(stop(d), 0);
    }
}

/// Two pool members: A with one region, B with four, elastic and auto-scaling with a
/// MONITOR_PERIOD of 1 s (a sender paused by a loaded machine does not lose its region for
/// it); `pool` adds to their `pool:` sections. Returns once A knows B's free regions.
fn a_short_and_b_roomy(tag: &str, pool: &str) -> (Vec<TempDir>, Daemon, Daemon) {
    let dirs: Vec<TempDir> = (0..2).map(|i| TempDir::new(&format!("{tag}{i}"))).collect();
    let section = pool_section(&dirs[0].0);
    let elastic = "elastic: {enabled: true, autoscale: true, monitor_period_ms: 1000}\n";
    let node = |name: &str, dir: &std::path::Path, cfg: &str| launch_bin(&bin_of(name), dir, cfg, &[], Stdio::inherit());
    let a = node("A", &dirs[0].0, &format!("regions: 1\n{elastic}{}{pool}", section("")));
    let b = node("B", &dirs[1].0, &format!("regions: 4\n{elastic}{}{pool}", section(&a.pool.unwrap().to_string())));
    let knows_b = |v: &serde_json::Value| v["pool"]["members"][0]["free_regions"].as_u64() >= Some(1);
    let v = status_within(&a.api, Duration::from_secs(30), knows_b);
    assert!(knows_b(&v), "{}", v["pool"]);
    // The pool protocol's version A speaks to B: the newest both speak, once they have greeted
    // each other (`SNIC_TEST_PROTOCOL` when B runs another release; not known when A does).
    if std::env::var_os("SNIC_TEST_BIN_A").is_none() {
        let want =
            std::env::var("SNIC_TEST_PROTOCOL").ok().and_then(|v| v.parse().ok()).unwrap_or(u64::from(snic_core::pool::message::NEWEST));
        let speaks = |v: &serde_json::Value| v["pool"]["members"][0]["version"].as_u64() == Some(want);
        let v = status_within(&a.api, Duration::from_secs(30), speaks);
        assert!(speaks(&v), "A speaks version {want} to B: {}", v["pool"]);
    }
    (dirs, a, b)
}

/// Automatic placement and move back between two daemons (paper §4.3, §5): node A has one
/// region, which tenant green's busy chain holds. Blue's packets need a chain A has no room
/// for: A's pool agent picks B (a member with free regions), B hosts blue's DAG, and blue's
/// packets — those that waited for the answer too — run on B and reach blue's receiver from B.
/// Green stops: its chain is descheduled, A has room a whole MONITOR_PERIOD, and blue's chain
/// comes home with its NTs' state — its packets reach the receiver from A again, each flow on
/// the public port B's SNAT gave it (B mapped them in an order a fresh NAT at A would not) —
/// and B no longer hosts it.
#[test]
fn a_chain_with_no_room_at_home_runs_on_a_peer_and_comes_home_when_room_returns() {
    let (_dirs, a, b) = a_short_and_b_roomy("auto", "");
    let (rb, rg) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
    let all = demo_with_routes(&rb, &rg);
    let green: Vec<&str> = all.split("\n---\n").filter(|d| d.contains("green")).collect();
    let (st, v) = http("POST", &format!("{}/v1/apply", a.api), &green.join("\n---\n"));
    assert_eq!(st, 200, "{v}");
    // Green keeps its chain busy (bounded: 60 s at most), so it holds A's only region.
    let stop_green = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (stop_green, data) = (stop_green.clone(), a.data);
        std::thread::spawn(move || {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            let f = frame(200, L4Spec::Udp { src_port: 4000, dst_port: 5001 });
            let t0 = Instant::now();
            while !stop_green.load(std::sync::atomic::Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(60) {
                s.send_to(&f, data).unwrap();
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    // (What green's receiver does not read, its socket drops.)
    let green_runs = |v: &serde_json::Value| {
        v["regions"]["instances"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["state"] == "running" && r["chain"][0] == "green/green-counter"))
    };
    let v = status_within(&a.api, Duration::from_secs(30), green_runs);
    assert!(green_runs(&v), "{}", v["elastic"]);
    let (st, v) = http("POST", &format!("{}/v1/apply", a.api), &all);
    assert_eq!(st, 200, "{v}");
    // Blue's packets of flow `sport`, one at a time: where each is delivered from, and the
    // public port blue's SNAT gave it.
    let blue = |sport: u16, n: usize| -> Vec<(SocketAddr, u16)> {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        rb.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 2048];
        (0..n)
            .map(|_| {
                s.send_to(&frame(100, L4Spec::Udp { src_port: sport, dst_port: 5001 }), a.data).unwrap();
                let (k, from) = rb.recv_from(&mut buf).expect("every blue packet is delivered");
                let inner = parse_inner(&buf[8..k]).unwrap();
                assert_eq!(inner.key.src, IpAddr::from([203, 0, 113, 1]), "blue's SNAT ran");
                (from, inner.key.src_port)
            })
            .collect()
    };
    // Flow 4001 first, then 4000: B's NAT maps them in that order.
    let (other, froms) = (blue(4001, 1), blue(4000, 20));
    assert!(froms.iter().chain(&other).all(|f| f.0 == b.data), "blue runs on B while A has no room: {froms:?}");
    let port = froms[0].1;
    assert!(froms.iter().all(|f| f.1 == port) && other[0].1 != port, "one port per flow: {other:?} {froms:?}");
    let va = status_until(&a.api, |v| v["redirects"][0]["peer"] == b.data.to_string().as_str());
    assert_eq!(va["redirects"][0]["peer"], b.data.to_string().as_str(), "{}", va["redirects"]);
    let events = |v: &serde_json::Value, what: &str| {
        v["elastic"]["events"].as_array().into_iter().flatten().any(|e| e["event"].as_str().is_some_and(|s| s.contains(what)))
    };
    assert!(events(&va, "asked pool member") && events(&va, "runs on peer"), "{}", va["elastic"]["events"]);
    let vb = status_until(&b.api, |v| v["hosted"][0]["dag"] == "blue/blue-edge");
    assert_eq!(vb["hosted"][0]["tenant"], "blue", "{}", vb["hosted"]);
    // Green stops: A has room again, and blue comes home; its packets run at A from then on.
    stop_green.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
    let home = |v: &serde_json::Value| v["redirects"].as_array().is_some_and(|r| r.is_empty()) && events(v, "moved back from peer");
    let va = status_within(&a.api, Duration::from_secs(30), home);
    assert!(home(&va), "{} {}", va["redirects"], va["elastic"]["events"]);
    let froms = blue(4000, 5);
    assert!(froms.iter().all(|f| f.0 == a.data), "blue came home once A had room: {froms:?}");
    assert!(froms.iter().all(|f| f.1 == port), "flow 4000 kept the port B gave it: {froms:?} (was {port})");
    assert_eq!(blue(4001, 1), vec![(a.data, other[0].1)], "so did flow 4001");
    assert!(events(&va, "with its state"), "{}", va["elastic"]["events"]);
    let counter = |name: &str| va["elastic"]["counters"].as_array().and_then(|c| c.iter().find(|c| c[0] == name)).map(|c| c[1].clone());
    assert_eq!((counter("remote_launches"), counter("moves_back")), (Some(1.into()), Some(1.into())), "{}", va["elastic"]);
    let vb = status_until(&b.api, |v| v["hosted"].as_array().is_some_and(|h| h.is_empty()));
    assert_eq!(vb["hosted"].as_array().map(Vec::len), Some(0), "B no longer hosts blue: {}", vb["hosted"]);
    assert_eq!(stop(a), 0);
    assert_eq!(stop(b), 0);
    drop(rg);
}

/// A chain A carries only a share of: one synthetic NT declared to carry 100 packets a second,
/// on A's one region.
fn spill_manifest(rb: &UdpSocket) -> String {
    format!(
        "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: blue}}\nspec: {{weight: 1, vnis: [100]}}\n---\n\
         apiVersion: snic/v1\nkind: NT\nmetadata: {{name: blue-slow}}\nspec: {{tenant: blue, config: {{kind: synthetic, cost_ns: 1000, capacity_pps: 100}}}}\n---\n\
         apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: blue-edge}}\nspec: {{tenant: blue, nodes: [blue-slow]}}\n---\n\
         apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: blue-all}}\nspec: {{vni: 100, action: {{dag: blue-edge}}}}\n---\n\
         apiVersion: snic/v1\nkind: Route\nmetadata: {{name: blue-b}}\nspec: {{vni: 100, mac: '{MAC_B}', vtep: '{}'}}\n",
        rb.local_addr().unwrap()
    )
}

/// Sends blue packets (VNI 100) to `to`, two a millisecond at most, packet `i` on flow
/// `flow(i)` (its UDP source port), until `done` holds of `api`'s status (read every 200 ms)
/// or `limit` passed; records in `seen` which data addresses delivered each flow to `rx`. The
/// last status.
fn pump(
    to: SocketAddr,
    api: &str,
    rx: &UdpSocket,
    limit: Duration,
    flow: impl Fn(u64) -> u16,
    seen: &mut std::collections::BTreeMap<u16, std::collections::BTreeSet<SocketAddr>>,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_nonblocking(true).unwrap();
    let (t0, mut checked, mut i) = (Instant::now(), Instant::now(), 0u64);
    let mut buf = [0u8; 2048];
    let mut drain = |seen: &mut std::collections::BTreeMap<u16, std::collections::BTreeSet<SocketAddr>>| {
        while let Ok((k, from)) = rx.recv_from(&mut buf) {
            let port = parse_inner(&buf[8..k]).unwrap().key.src_port;
            seen.entry(port).or_default().insert(from);
        }
    };
    loop {
        for _ in 0..2 {
            tx.send_to(&frame(100, L4Spec::Udp { src_port: flow(i), dst_port: 5001 }), to).unwrap();
            i += 1;
        }
        drain(seen);
        if checked.elapsed() >= Duration::from_millis(200) || t0.elapsed() > limit {
            checked = Instant::now();
            let (s, v) = http("GET", &format!("{api}/v1/status"), "");
            if (s == 200 && done(&v)) || t0.elapsed() > limit {
                // (What is still on its way is recorded by the next call, or not at all: each
                // flow's node is checked on what arrived.)
                drain(seen);
                rx.set_nonblocking(false).unwrap();
                return v;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Overflow by flow share between two daemons (issue 17 item 3): blue's chain, on A's only
/// region, is offered several times what it carries. A records blue's flows, asks B to host
/// the chain, and sends B a share of the *new* flows only: the flows that ran at A before stay
/// there, every flow is delivered by one node only, and the status shows the share and the
/// flow table. The load falls to what A carries: new flows stay at A, and once B's flows have
/// been idle `pool.flow_idle_ms`, B no longer hosts the chain.
#[test]
fn an_overloaded_chain_spills_a_share_of_its_new_flows_to_a_peer_and_each_flow_keeps_its_node() {
    let (_dirs, a, b) = a_short_and_b_roomy("spill", "  flow_idle_ms: 1000\n");
    let rb = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (st, v) = http("POST", &format!("{}/v1/apply", a.api), &spill_manifest(&rb));
    assert_eq!(st, 200, "{v}");
    let spill = |v: &serde_json::Value| v["redirects"].as_array().and_then(|r| r.first()).cloned();
    let events = |v: &serde_json::Value, what: &str| {
        v["elastic"]["events"].as_array().into_iter().flatten().any(|e| e["event"].as_str().is_some_and(|s| s.contains(what)))
    };
    // 1. Flows 1000..1016 (several times what A carries) until B takes a share of them.
    let mut before = std::collections::BTreeMap::new();
    let v = pump(
        a.data,
        &a.api,
        &rb,
        Duration::from_secs(30),
        |i| 1000 + (i % 16) as u16,
        &mut before,
        |v| spill(v).is_some_and(|r| r["share"].as_u64().is_some_and(|s| s > 0 && s < 1024)),
    );
    let r = spill(&v).unwrap_or_else(|| panic!("A spills: {} {} {} {}", v["redirects"], v["elastic"], v["regions"], v["pool"]));
    assert_eq!(r["peer"], b.data.to_string().as_str(), "{r}");
    assert!(events(&v, "asked pool member") && events(&v, "new flows go there"), "{}", v["elastic"]["events"]);
    // 2. New flows 2000..2064 join the old ones, until B has delivered some.
    let mut after = std::collections::BTreeMap::new();
    let on_b = |seen: &std::collections::BTreeMap<u16, std::collections::BTreeSet<SocketAddr>>| {
        seen.iter().filter(|(p, f)| **p >= 2000 && f.contains(&b.data)).count()
    };
    let mut v = v;
    for _ in 0..20 {
        v = pump(
            a.data,
            &a.api,
            &rb,
            Duration::from_secs(1),
            |i| if i % 2 == 0 { 1000 + (i / 2 % 16) as u16 } else { 2000 + (i / 2 % 64) as u16 },
            &mut after,
            |_| false,
        );
        if on_b(&after) > 0 && after.keys().filter(|p| **p >= 2000).count() == 64 {
            break;
        }
    }
    assert!(on_b(&after) > 0, "B delivers some new flows: {after:?}");
    assert!(after.iter().any(|(p, f)| *p >= 2000 && f.contains(&a.data)), "A keeps the others: {after:?}");
    // The flows A ran before the spill stay at A; every flow has one node.
    for (p, from) in before.iter().chain(&after) {
        assert_eq!(from.len(), 1, "flow {p} was delivered by {from:?}");
        if *p < 2000 {
            assert_eq!(from.first(), Some(&a.data), "flow {p} ran at A before the spill and stays there");
        }
    }
    let r = spill(&v).expect("still spilling");
    let flows = |k: &str| r["flows"][k].as_u64().unwrap_or_else(|| panic!("{r}"));
    assert!(flows("here") >= 16 && flows("peer") >= 1, "the flow table: {r}");
    let vb = status_until(&b.api, |v| v["hosted"][0]["dag"] == "blue/blue-edge");
    assert_eq!(vb["hosted"][0]["tenant"], "blue", "{}", vb["hosted"]);
    // 3. The load falls to what A carries, over flows A runs and a new flow each second: once
    // it has fitted a period, new flows stay at A; B's flows end, and once they have been idle
    // a second B is told it may stop hosting.
    let here: Vec<u16> = after.iter().chain(&before).filter(|(_, f)| f.contains(&a.data)).map(|(p, _)| *p).take(8).collect();
    let mut late = std::collections::BTreeMap::new();
    let ended = |v: &serde_json::Value| events(v, "have ended") && v["redirects"].as_array().is_some_and(|r| r.is_empty());
    let mut v = serde_json::Value::Null;
    for round in 0..30u64 {
        // 20 packets a second, one every 50 ms: 4 flows that run at A and one new flow a round.
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        for p in here.iter().copied().take(4).chain([3000 + round as u16]).cycle().take(20) {
            s.send_to(&frame(100, L4Spec::Udp { src_port: p, dst_port: 5001 }), a.data).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        v = pump(a.data, &a.api, &rb, Duration::ZERO, |_| here[0], &mut late, |_| false);
        if ended(&v) {
            break;
        }
    }
    assert!(ended(&v), "the spill ends: {} {}", v["redirects"], v["elastic"]["events"]);
    assert!(events(&v, "fits here again"), "{}", v["elastic"]["events"]);
    // (New flows sent before A's load had fitted a whole period may have gone to B.)
    assert!(late.values().all(|f| f.len() == 1), "each flow on one node: {late:?}");
    assert!(here.iter().take(4).all(|p| late.get(p).is_some_and(|f| f.contains(&a.data))), "A's flows stay at A: {late:?}");
    let newest = late.range(3000..).next_back().expect("new flows were sent");
    assert!(newest.1.contains(&a.data), "new flows stay at A once it carries the load: {late:?}");
    let vb = status_until(&b.api, |v| v["hosted"].as_array().is_some_and(|h| h.is_empty()));
    assert_eq!(vb["hosted"].as_array().map(Vec::len), Some(0), "B no longer hosts blue: {}", vb["hosted"]);
    let counter = |name: &str| v["elastic"]["counters"].as_array().and_then(|c| c.iter().find(|c| c[0] == name)).map(|c| c[1].clone());
    assert_eq!(counter("spills"), Some(1.into()), "{}", v["elastic"]);
    assert_eq!(stop(a), 0);
    assert_eq!(stop(b), 0);
}

/// A local etcd for one test: its own data directory and ports on loopback, stopped by PID
/// (SIGKILL) when dropped.
struct EtcdServer {
    child: Option<Child>,
    url: String,
    _dir: TempDir,
}

impl EtcdServer {
    fn start(tag: &str) -> EtcdServer {
        let dir = TempDir::new(&format!("etcd-{tag}"));
        // Free ports for its clients and its peers (taken by the OS, then handed to etcd).
        let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (client, peer) = (free(), free());
        let url = format!("http://127.0.0.1:{client}");
        let child = Command::new("etcd")
            .args(["--data-dir", dir.0.join("data").to_str().unwrap(), "--name", "snic-test"])
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("snic-test=http://127.0.0.1:{peer}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd (Debian etcd-server) must be installed: scripts/test.sh installs it");
        let e = EtcdServer { child: Some(child), url, _dir: dir };
        // Up once it takes connections and answers its health check (bounded).
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "etcd did not come up at {}", e.url);
            std::thread::sleep(Duration::from_millis(50));
        }
        let health = format!("{}/health", e.url);
        while http("GET", &health, "").0 != 200 {
            assert!(t0.elapsed() < Duration::from_secs(20), "etcd at {} is not healthy", e.url);
            std::thread::sleep(Duration::from_millis(50));
        }
        e
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn tenants(api: &str) -> Vec<String> {
    let (s, v) = http("GET", &format!("{api}/v1/objects/tenant"), "");
    assert_eq!(s, 200, "{v}");
    let mut names: Vec<String> =
        v.as_array().into_iter().flatten().filter_map(|t| t["metadata"]["name"].as_str().map(String::from)).collect();
    names.sort();
    names
}

/// `api`'s tenants once `ok` holds of them, or the last seen after 30 s.
fn tenants_within(api: &str, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let t = tenants(api);
        if ok(&t) || t0.elapsed() > Duration::from_secs(30) {
            return t;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two nodes keep one desired state in etcd (node.yaml `pool.etcd`): an apply on either is
/// deployed by both; applies racing on the two nodes each either land whole or are refused
/// (409), none lost; a node restarted loads the pool's state without a re-apply; with etcd gone,
/// an apply is refused with a clear error and the node keeps running what it has.
#[test]
#[ignore = "needs etcd (Debian etcd-server): scripts/test.sh installs it and runs this"]
fn two_nodes_share_one_desired_state_in_etcd() {
    let mut etcd = EtcdServer::start("share");
    let dirs: Vec<TempDir> = (0..2).map(|i| TempDir::new(&format!("etcd-node{i}"))).collect();
    let section = pool_section(&dirs[0].0);
    let with_etcd = |seeds: &str| format!("{}  etcd: [{}]\n", section(seeds), etcd.url);
    let a = start_with(&dirs[0].0, &with_etcd(""));
    let seed = a.pool.expect("A's pool address").to_string();
    let b = start_with(&dirs[1].0, &with_etcd(&seed));

    // An apply on A is deployed by B.
    let (st, v) = http("POST", &format!("{}/v1/apply", a.api), include_str!("../../../examples/demo.yaml"));
    assert_eq!(st, 200, "{v}");
    let both = vec!["blue".to_string(), "green".to_string()];
    assert_eq!(tenants_within(&b.api, |t| t == both.as_slice()), both);
    let chains = |v: &serde_json::Value| v["regions"]["used"].as_u64().unwrap_or(0);
    let v = status_until(&b.api, |v| chains(v) == 2);
    assert_eq!(chains(&v), 2, "B runs the demo's two chains: {}", v["regions"]);

    // Applies race on the two nodes: each lands whole or is refused as stale; none is lost.
    let tenant = |name: &str, vni: u32| format!("apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{vnis: [{vni}]}}\n");
    let racer = |api: String, side: &'static str, base: u32| {
        std::thread::spawn(move || {
            let mut landed = Vec::new();
            for i in 0..10u32 {
                let name = format!("{side}{i}");
                let (st, v) = http("POST", &format!("{api}/v1/apply"), &tenant(&name, base + i));
                match st {
                    200 => landed.push(name),
                    409 => assert_eq!(v["error"]["code"], "state_changed", "{v}"),
                    _ => panic!("{st} {v}"),
                }
            }
            landed
        })
    };
    let (ra, rb) = (racer(a.api.clone(), "a", 1000), racer(b.api.clone(), "b", 2000));
    let mut landed = ra.join().unwrap();
    landed.extend(rb.join().unwrap());
    eprintln!("racing applies: {} of 20 landed, the rest refused as stale (409)", landed.len());
    let mut want = both.clone();
    want.extend(landed);
    want.sort();
    assert!(want.len() > 2, "some applies landed");
    assert_eq!(tenants_within(&a.api, |t| t == want.as_slice()), want, "A has every apply that landed, on either node");
    assert_eq!(tenants_within(&b.api, |t| t == want.as_slice()), want, "and so has B");

    // B restarted loads the pool's state (its own state_dir is not used).
    assert_eq!(stop(b), 0);
    let b = start_with(&dirs[1].0, &with_etcd(&seed));
    assert_eq!(tenants(&b.api), want, "loaded at start, no re-apply");

    // etcd gone: an apply is refused, clearly; the nodes keep running what they have.
    etcd.kill();
    let (st, v) = http("POST", &format!("{}/v1/apply", b.api), &tenant("late", 3000));
    assert_eq!((st, v["error"]["code"].as_str()), (503, Some("state_store_unavailable")), "{v}");
    assert!(v["error"]["reason"].as_str().unwrap_or("").contains("etcd"), "{v}");
    assert_eq!(tenants(&b.api), want);
    assert_eq!(chains(&status_until(&a.api, |_| true)), 2, "A still runs its chains");
}

/// blue (VNI 100) through its own wasm firewall (`module_file`, compiled from
/// examples/wasm/firewall.c with `rules`), to `b`.
fn wasm_manifest(b: &UdpSocket, rules: &str) -> String {
    format!(
        "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: blue}}\nspec: {{vnis: [100]}}\n---\n\
         apiVersion: snic/v1\nkind: NT\nmetadata: {{name: blue-own}}\nspec: {{tenant: blue, config: {{kind: wasm, module_file: fw.wasm, config: {rules:?}}}}}\n---\n\
         apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: blue-path}}\nspec: {{tenant: blue, nodes: [blue-own]}}\n---\n\
         apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: blue-all}}\nspec: {{vni: 100, action: {{dag: blue-path}}}}\n---\n\
         apiVersion: snic/v1\nkind: Route\nmetadata: {{name: blue-b}}\nspec: {{vni: 100, mac: '{MAC_B}', vtep: '{}'}}\n",
        b.local_addr().unwrap()
    )
}

fn snic_apply(api: &str, file: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_snic")).args(["apply", "--server", api, "-f"]).arg(file).output().unwrap()
}

fn nt_counter(v: &serde_json::Value, nt: &str, name: &str) -> u64 {
    let regions = v["regions"]["instances"].as_array().into_iter().flatten();
    regions
        .flat_map(|r| r["counters"].as_array().into_iter().flatten())
        .filter(|c| c[0] == nt && c[1] == name)
        .filter_map(|c| c[2].as_u64())
        .sum()
}

#[test]
fn a_tenants_wasm_nt_deployed_with_snic_apply_filters_traffic_and_is_replaced_without_loss() {
    let dir = TempDir::new("wasm");
    let module = snic_nt::wasm::compile_c(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/wasm/firewall.c"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.0.as_path().join("fw.wasm"), &module).unwrap();
    let d = start(dir.0.as_path());
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let manifest = dir.0.as_path().join("blue.yaml");
    std::fs::write(&manifest, wasm_manifest(&b, "deny 6 * * * 22\ndefault allow\n")).unwrap();
    let out = snic_apply(&d.api, &manifest);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The module decides: UDP passes, TCP to port 22 is dropped with its code.
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp = |port| frame(100, L4Spec::Udp { src_port: 4000, dst_port: port });
    for _ in 0..5 {
        a.send_to(&udp(5001), d.data).unwrap();
        a.send_to(&frame(100, L4Spec::Tcp { src_port: 4001, dst_port: 22, flags: 2 }), d.data).unwrap();
    }
    let got = recv_n(&b, 5);
    assert_eq!(got.len(), 5);
    assert!(got.iter().all(|f| parse_inner(&f[8..]).unwrap().key.proto == 17), "only UDP came through");
    let v = status_until(&d.api, |v| nt_counter(v, "blue/blue-own", "c1") == 5);
    assert_eq!((nt_counter(&v, "blue/blue-own", "c0"), nt_counter(&v, "blue/blue-own", "c1")), (5, 5), "the module's own counters: {v}");
    assert_eq!(nt_counter(&v, "blue/blue-own", "drop_code_1"), 5);
    let blue = v["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "blue").unwrap();
    assert!(blue["stats"]["drops"].to_string().contains("wasm_drop"), "{blue}");
    let (_, metrics) = http("GET", &format!("{}/metrics", d.api), "");
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(metrics.lines().any(|l| l.contains("snic_nt_counter_total") && l.contains("counter=\"c1\"") && l.ends_with(" 5")), "{metrics}");

    // A new version (one more rule) replaces the running one while blue's traffic flows: a
    // sender keeps a window of packets in flight and waits for each window to arrive. The swap
    // is applied once 50 packets went through, and the sender stops 50 packets after it (by
    // count, not time: on any machine the traffic crosses the swap).
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    let (data, done, count) = (d.data, std::sync::Arc::new(AtomicBool::new(false)), std::sync::Arc::new(AtomicUsize::new(0)));
    let flow = {
        let (done, count) = (done.clone(), count.clone());
        let b = b.try_clone().unwrap();
        std::thread::spawn(move || {
            let (mut sent, mut got) = (0usize, 0usize);
            let t0 = Instant::now();
            while !done.load(Relaxed) && t0.elapsed() < Duration::from_secs(60) {
                for _ in 0..WINDOW {
                    a.send_to(&udp(5001), data).unwrap();
                }
                sent += WINDOW;
                got += recv_n(&b, WINDOW).len();
                count.store(sent, Relaxed);
                if got < sent {
                    break;
                }
            }
            (sent, got)
        })
    };
    // Until `n` packets were sent (or the sender stopped on a loss, or 30 s passed).
    let sent_by = |n: usize| {
        let t0 = Instant::now();
        while count.load(Relaxed) < n && !flow.is_finished() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        count.load(Relaxed)
    };
    assert!(sent_by(50) >= 50, "traffic flows before the swap");
    std::fs::write(&manifest, wasm_manifest(&b, "deny 6 * * * 22\ndeny 17 * * * 6000\ndefault allow\n")).unwrap();
    let out = snic_apply(&d.api, &manifest);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let at_swap = count.load(Relaxed);
    assert!(sent_by(at_swap + 50) >= at_swap + 50, "traffic flows after the swap");
    done.store(true, Relaxed);
    let (sent, got) = flow.join().unwrap();
    assert_eq!(got, sent, "no packet lost while the module was replaced");
    // The new version decides now.
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    a.send_to(&udp(6000), d.data).unwrap();
    a.send_to(&udp(5001), d.data).unwrap();
    // (In order through one instance: had 6000 passed, it would come first.)
    let got = recv_n(&b, 1);
    assert_eq!(parse_inner(&got[0][8..]).unwrap().key.dst_port, 5001, "port 6000 is denied by the new rules");

    // What cannot be deployed is refused by name, and the running version stays.
    std::fs::write(dir.0.as_path().join("fw.wasm"), b"not a module").unwrap();
    let out = snic_apply(&d.api, &manifest);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("blue-own") && err.contains("not a WebAssembly module"), "{err}");
    std::fs::write(dir.0.as_path().join("fw.wasm"), &module).unwrap();
    let shared = wasm_manifest(&b, "default allow").replace("{tenant: blue, config", "{tenant: blue, shared_with: ['*'], config");
    std::fs::write(&manifest, shared).unwrap();
    let err = String::from_utf8_lossy(&snic_apply(&d.api, &manifest).stderr).to_string();
    assert!(err.contains("cannot be shared"), "{err}");
    a.send_to(&udp(6000), d.data).unwrap();
    a.send_to(&udp(5001), d.data).unwrap();
    let got = recv_n(&b, 1);
    assert_eq!(parse_inner(&got[0][8..]).unwrap().key.dst_port, 5001, "the running version still decides");

    // A hostile tenant beside it: red's modules loop forever, trap, or return nonsense. Its
    // packets are dropped with their reasons; blue is served throughout and the node lives.
    let hostile = |name: &str, body: &str| {
        let m = wat::parse_str(format!(
            r#"(module (memory (export "memory") 1) (data (i32.const 4) "\00\08\00\00")
                 (func (export "snic_packet") (result i32) i32.const 0)
                 (func (export "snic_process") (param i32) (result i32) {body}))"#
        ))
        .unwrap();
        use base64::Engine as _;
        format!(
            "apiVersion: snic/v1\nkind: NT\nmetadata: {{name: {name}}}\nspec: {{tenant: red, config: {{kind: wasm, module: {}, max_fuel_per_packet: 100000}}}}\n---\n",
            base64::engine::general_purpose::STANDARD.encode(m)
        )
    };
    let red = format!(
        "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: red}}\nspec: {{vnis: [300]}}\n---\n{}{}{}{}\
         apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: red-path}}\nspec: {{tenant: red, nodes: [red-loop, red-oob, red-grow, red-verdict]}}\n---\n\
         apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: red-all}}\nspec: {{vni: 300, action: {{dag: red-path}}}}\n",
        // (The packet area is at 0: the destination port is the u16 at 34.)
        hostile("red-loop", "(if (i32.eq (i32.load16_u (i32.const 34)) (i32.const 1)) (then (loop $l (br $l)))) i32.const 0"),
        hostile("red-oob", "(if (i32.eq (i32.load16_u (i32.const 34)) (i32.const 2)) (then (drop (i32.load (i32.const 0x7ffffff0))))) i32.const 0"),
        hostile("red-grow", "(drop (memory.grow (i32.const 60000))) i32.const 0"),
        hostile("red-verdict", "i32.const 0x7777"),
    );
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &red);
    assert_eq!(s, 200, "{v}");
    for port in [1, 2, 3, 1, 2, 3] {
        a.send_to(&frame(300, L4Spec::Udp { src_port: 1, dst_port: port }), d.data).unwrap();
        a.send_to(&udp(5001), d.data).unwrap();
    }
    assert_eq!(recv_n(&b, 6).len(), 6, "blue is served beside red");
    let v = status_until(&d.api, |v| {
        let drops = v["tenants"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == "red")
            .map(|t| t["stats"]["drops"].to_string())
            .unwrap_or_default();
        drops.contains("wasm_time_limit") && drops.contains("wasm_trap") && drops.contains("wasm_bad_verdict")
    });
    let red_drops = v["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "red").unwrap()["stats"]["drops"].to_string();
    assert!(
        ["wasm_time_limit", "wasm_trap", "wasm_bad_verdict"].iter().all(|r| red_drops.contains(r)),
        "red's packets to port 1 loop until their bound, to 2 trap, to 3 reach the bad verdict: {red_drops}"
    );
    assert_eq!(tenant_stat(&v, "red", "tx_packets"), 0);
    assert!(v["data_plane"]["up"].as_bool().unwrap(), "the node lives");

    // The example tenant of examples/wasm deploys as its README says (UDP to DNS only).
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/wasm/blue-wasm.yaml");
    std::fs::copy(example, dir.0.join("blue-wasm.yaml")).unwrap();
    std::fs::write(dir.0.join("firewall.wasm"), &module).unwrap();
    let out = snic_apply(&d.api, &dir.0.join("blue-wasm.yaml"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    a.send_to(&udp(5001), d.data).unwrap();
    a.send_to(&udp(53), d.data).unwrap();
    let got = recv_n(&b, 1);
    assert_eq!(parse_inner(&got[0][8..]).unwrap().key.dst_port, 53, "the example's rules decide");
    stop(d);
}

/// A module around `body` (the body of `snic_process`), with `init` as its `snic_init`'s, and
/// the ABI's imports; its packet area at 0.
fn hostile_module(init: &str, body: &str) -> String {
    use base64::Engine as _;
    let m = wat::parse_str(format!(
        r#"(module
             (import "snic" "config_read" (func $cfg (param i32 i32) (result i32)))
             (memory (export "memory") 2) (data (i32.const 4) "\00\08\00\00")
             (func (export "snic_packet") (result i32) i32.const 0)
             (func (export "snic_init") (result i32) {init})
             (func (export "snic_process") (param i32) (result i32) {body}))"#
    ))
    .unwrap();
    base64::engine::general_purpose::STANDARD.encode(m)
}

/// Issue 49: a tenant's code cannot hold the node. Red's packets would each run for seconds
/// within their fuel (an endless loop with 10^9 units; endless 64 KiB host reads); its starts
/// would too. Blue, beside it, loses nothing; applies (blue's, and the operator's delete of
/// red's NT) are answered; red's slow start is refused once, never run again by others'
/// applies; and refused modules do not grow the daemon.
#[test]
fn a_hostile_tenants_wasm_cannot_hold_the_node_or_its_applies() {
    let dir = TempDir::new("hostile-wasm");
    let d = start(dir.0.as_path());
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let blue = format!(
        "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: blue}}\nspec: {{vnis: [100]}}\n---\n\
         apiVersion: snic/v1\nkind: NT\nmetadata: {{name: blue-count}}\nspec: {{tenant: blue, config: {{kind: counter}}}}\n---\n\
         apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: blue-path}}\nspec: {{tenant: blue, nodes: [blue-count]}}\n---\n\
         apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: blue-all}}\nspec: {{vni: 100, action: {{dag: blue-path}}}}\n---\n\
         apiVersion: snic/v1\nkind: Route\nmetadata: {{name: blue-b}}\nspec: {{vni: 100, mac: '{MAC_B}', vtep: '{}'}}\n",
        b.local_addr().unwrap()
    );
    let red_nt = |name: &str, module: &str, extra: &str| {
        format!(
            "apiVersion: snic/v1\nkind: NT\nmetadata: {{name: {name}}}\nspec: {{tenant: red, config: {{kind: wasm, module: {module}, max_fuel_per_packet: 1000000000, max_overruns_per_s: 4294967295, config: {:?}{extra}}}}}\n---\n",
            "x".repeat(65536)
        )
    };
    let red = format!(
        "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: red}}\nspec: {{vnis: [300]}}\n---\n{}{}\
         apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: red-path}}\nspec: {{tenant: red, nodes: [red-loop, red-reads]}}\n---\n\
         apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: red-all}}\nspec: {{vni: 300, action: {{dag: red-path}}}}\n",
        red_nt(
            "red-loop",
            &hostile_module(
                "i32.const 0",
                "(if (i32.eq (i32.load16_u (i32.const 34)) (i32.const 1)) (then (loop $l (br $l)))) i32.const 0"
            ),
            ""
        ),
        red_nt(
            "red-reads",
            &hostile_module("i32.const 0", "(loop $l (drop (call $cfg (i32.const 0) (i32.const 65536))) (br $l)) i32.const 0"),
            ""
        ),
    );
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &format!("{blue}---\n{red}"));
    assert_eq!(s, 200, "{v}");

    // Red floods its VNI from a thread (bounded) while blue sends one packet at a time and waits
    // for it: every one of blue's packets arrives.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let (done, data) = (done.clone(), d.data);
        std::thread::spawn(move || {
            let a = UdpSocket::bind("127.0.0.1:0").unwrap();
            let p = frame(300, L4Spec::Udp { src_port: 1, dst_port: 1 });
            let mut sent = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) && sent < 2_000_000 {
                let _ = a.send_to(&p, data);
                sent += 1;
                if sent.is_multiple_of(64) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            sent
        })
    };
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 2048];
    for i in 0..200u16 {
        a.send_to(&frame(100, L4Spec::Udp { src_port: 4000, dst_port: 5000 + i }), d.data).unwrap();
        let got = b.recv_from(&mut buf).unwrap_or_else(|e| panic!("blue's packet {i} did not arrive beside red: {e}"));
        assert_eq!(parse_inner(&buf[8..got.0]).unwrap().key.dst_port, 5000 + i);
    }
    // Applies are answered meanwhile: blue adds an NT; red's module that starts forever is
    // refused once (its start is bounded), and blue's next apply does not start it again.
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &blue.replace("blue-count}", "blue-count2}"));
    assert_eq!(s, 200, "{v}");
    let slow_start = red_nt("red-slow-start", &hostile_module("(loop $l (br $l)) i32.const 0", "i32.const 0"), "");
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &slow_start);
    assert_eq!(s, 400, "{v}");
    assert!(v["error"]["reason"].as_str().unwrap().contains("snic_init did not finish"), "{v}");
    let over = red_nt("red-greedy", &hostile_module("i32.const 0", "i32.const 0"), ", max_init_ms: 5000");
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &over);
    assert_eq!((s, v["error"]["field"].as_str()), (400, Some("spec.config.max_init_ms")), "over the operator's limit: {v}");
    let (s, v) = http("DELETE", &format!("{}/v1/objects/rule/red/red-all", d.api), "");
    assert_eq!(s, 200, "the operator's delete is answered: {v}");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = flood.join().unwrap();
    let v = status_until(&d.api, |v| {
        let r = v["tenants"].as_array().into_iter().flatten().find(|t| t["name"] == "red").map(|t| t["stats"]["drops"].to_string());
        r.is_some_and(|d| d.contains("wasm_time_limit"))
    });
    assert!(sent > 0 && v["data_plane"]["up"].as_bool().unwrap(), "the node lives");

    // Refused modules leave nothing behind: 25 distinct ones, refused when they start, each with
    // a 150 KB function they never ran, grow the daemon by far less than the 3.7 MB they would if
    // each stayed (a wasmi engine shared by all modules kept every function it had not yet
    // compiled).
    let refused = |k: usize| {
        let body: String = (0..20_000).map(|j| format!("(drop (i32.add (i32.const {k}) (i32.const {j})))")).collect();
        red_nt(&format!("red-bad{k}"), &hostile_module("i32.const 7", &format!("{body} i32.const 0")), "")
    };
    for k in 0..5 {
        assert_eq!(http("POST", &format!("{}/v1/apply", d.api), &refused(k)).0, 400);
    }
    let before = peak_rss_kib(d.child.id());
    for k in 5..30 {
        let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &refused(k));
        assert_eq!(s, 400, "{v}");
    }
    // (The kernel reports the peak as at least the current size, and records the current size
    // as the peak only lazily: memory returned meanwhile can make the reading fall.)
    let grew = peak_rss_kib(d.child.id()).saturating_sub(before);
    assert!(grew < 2 << 10, "the daemon grew by {grew} KiB for 25 refused modules");
    stop(d);
}

/// An HTTP request, with a bearer token if one is given: the status and the JSON body (or the
/// text as a JSON string).
fn http_as(method: &str, url: &str, body: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let bearer = format!("Bearer {}", token.unwrap_or(""));
    let mut r = match method {
        "POST" => {
            let r = agent.post(url).header("content-type", "application/yaml");
            if token.is_some() { r.header("authorization", &bearer) } else { r }.send(body.to_string()).unwrap()
        }
        "DELETE" => {
            let r = agent.delete(url);
            if token.is_some() { r.header("authorization", &bearer) } else { r }.call().unwrap()
        }
        _ => {
            let r = agent.get(url);
            if token.is_some() { r.header("authorization", &bearer) } else { r }.call().unwrap()
        }
    };
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}

#[test]
fn credentials_let_each_tenant_touch_only_its_own_objects() {
    let dir = TempDir::new("auth");
    let op_file = dir.0.join("operator.token");
    let (op, blue, green) = ("operator-secret-0123456789", "blue-secret-0123456789", "green-secret-0123456789");
    std::fs::write(&op_file, format!("{op}\n")).unwrap();
    let d = start_with(&dir.0, &format!("auth:\n  operator_token_file: {}\n", op_file.display()));
    let url = |p: &str| format!("{}{p}", d.api);
    let sha = snic_control::auth::token_sha256;
    let code = |v: &serde_json::Value| v["error"]["code"].as_str().unwrap_or("").to_string();

    // No credential, or a wrong one: 401 everywhere but the health check.
    for path in ["/v1/status", "/v1/objects/tenant", "/metrics"] {
        let (s, v) = http_as("GET", &url(path), "", None);
        assert_eq!((s, code(&v).as_str()), (401, "unauthenticated"), "{path}: {v}");
        let (s, _) = http_as("GET", &url(path), "", Some("guess-0123456789"));
        assert_eq!(s, 401, "{path}");
    }
    assert_eq!(http_as("POST", &url("/v1/apply"), "", None).0, 401);
    assert_eq!(http_as("GET", &url("/v1/health"), "", None).0, 200);

    // The operator makes the tenants, with their credentials, and green's objects.
    let tenants = format!(
        "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: blue}}\nspec: {{vnis: [100], token_sha256: {}}}\n---\n\
         apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: green}}\nspec: {{vnis: [200], weight: 2, token_sha256: {}}}\n---\n\
         apiVersion: snic/v1\nkind: NT\nmetadata: {{name: green-count}}\nspec: {{tenant: green, config: {{kind: counter}}}}\n---\n\
         apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: green-path}}\nspec: {{tenant: green, nodes: [green-count]}}\n---\n\
         apiVersion: snic/v1\nkind: Rule\nmetadata: {{name: green-all}}\nspec: {{vni: 200, action: {{dag: green-path}}}}\n---\n\
         apiVersion: snic/v1\nkind: Route\nmetadata: {{name: green-out}}\nspec: {{vni: 200, vtep: '127.0.0.1:9', default: true}}\n",
        sha(blue),
        sha(green)
    );
    let (s, v) = http_as("POST", &url("/v1/apply"), &tenants, Some(op));
    assert_eq!(s, 200, "{v}");

    // Blue writes its own NTs, DAGs and rules.
    let own = "apiVersion: snic/v1\nkind: NT\nmetadata: {name: blue-count}\nspec: {tenant: blue, config: {kind: counter}}\n---\n\
               apiVersion: snic/v1\nkind: DAG\nmetadata: {name: blue-path}\nspec: {tenant: blue, nodes: [blue-count]}\n---\n\
               apiVersion: snic/v1\nkind: Rule\nmetadata: {name: blue-all}\nspec: {vni: 100, action: {dag: blue-path}}\n";
    let (s, v) = http_as("POST", &url("/v1/apply"), own, Some(blue));
    assert_eq!(s, 200, "{v}");

    // ... and nothing of green's, nor its own weight, quotas or routes: 403, nothing applied.
    for (bad, field) in [
        ("kind: NT\nmetadata: {name: sneaky}\nspec: {tenant: green, config: {kind: counter}}", "spec.tenant"),
        ("kind: Rule\nmetadata: {name: steal}\nspec: {vni: 200, action: drop}", "spec.vni"),
        ("kind: Tenant\nmetadata: {name: blue}\nspec: {vnis: [100], weight: 100}", "kind"),
        ("kind: Tenant\nmetadata: {name: blue}\nspec: {vnis: [100], quotas: {store_buffers: 8000}}", "kind"),
        ("kind: Route\nmetadata: {name: blue-out}\nspec: {vni: 100, vtep: '127.0.0.1:9', default: true}", "kind"),
    ] {
        // With an object of its own in the same apply: all or nothing.
        let body = format!("{own}---\napiVersion: snic/v1\n{bad}\n").replace("blue-count}", "blue-count2}");
        let (s, v) = http_as("POST", &url("/v1/apply"), &body, Some(blue));
        assert_eq!((s, code(&v).as_str(), v["error"]["field"].as_str()), (403, "forbidden", Some(field)), "{bad}: {v}");
    }
    let (_, all) = http_as("GET", &url("/v1/objects/nt"), "", Some(op));
    let names: Vec<_> = all.as_array().unwrap().iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["blue/blue-count", "green/green-count"], "no refused apply left anything");

    // Names are the tenant's own: blue may name an NT as green named one, and gets its own
    // (`blue/green-count`); a name in green's scope is refused alike whether green has it or not.
    let (s, v) = http_as(
        "POST",
        &url("/v1/apply"),
        "apiVersion: snic/v1\nkind: NT\nmetadata: {name: green-count}\nspec: {tenant: blue, config: {kind: dummy}}\n",
        Some(blue),
    );
    assert_eq!((s, &v["applied"][0]["name"]), (200, &serde_json::json!("blue/green-count")), "{v}");
    let (_, g) = http_as("GET", &url("/v1/objects/nt/green/green-count"), "", Some(op));
    assert_eq!(g["spec"]["config"]["kind"], "counter", "green's NT is untouched: {g}");
    let in_greens = |name: &str| {
        let (s, v) = http_as(
            "POST",
            &url("/v1/apply"),
            &format!("apiVersion: snic/v1\nkind: NT\nmetadata: {{name: {name}}}\nspec: {{tenant: blue, config: {{kind: dummy}}}}\n"),
            Some(blue),
        );
        (s, v["error"]["code"].clone(), v["error"]["field"].clone(), v["error"]["reason"].clone())
    };
    assert_eq!(in_greens("green/green-count"), in_greens("green/nothing-here"));
    assert_eq!(in_greens("green/green-count").0, 400);
    assert_eq!(http_as("GET", &url("/v1/objects/nt/green-count"), "", Some(blue)).1["metadata"]["name"], "blue/green-count");
    assert_eq!(http_as("DELETE", &url("/v1/objects/nt/green-count"), "", Some(blue)).0, 200, "its own, by its short name");
    assert_eq!(http_as("GET", &url("/v1/objects/nt/green/green-count"), "", Some(op)).0, 200, "green's is still there");
    let (_, t) = http_as("GET", &url("/v1/objects/tenant/blue"), "", Some(op));
    assert_eq!(t["spec"]["weight"], 1);

    // Blue reads its own objects only; green's are not found, and cannot be deleted.
    let (_, mine) = http_as("GET", &url("/v1/objects/nt"), "", Some(blue));
    assert_eq!(mine.as_array().unwrap().len(), 1, "{mine}");
    let (_, tenants_seen) = http_as("GET", &url("/v1/objects/tenant"), "", Some(blue));
    assert_eq!(tenants_seen.as_array().unwrap().len(), 1, "{tenants_seen}");
    assert_eq!(http_as("GET", &url("/v1/objects/nt/green/green-count"), "", Some(blue)).0, 404);
    assert_eq!(http_as("GET", &url("/v1/objects/route/green-out"), "", Some(blue)).0, 404);
    assert_eq!(http_as("DELETE", &url("/v1/objects/rule/green/green-all"), "", Some(blue)).0, 404);
    assert_eq!(http_as("GET", &url("/v1/objects/rule/green/green-all"), "", Some(op)).0, 200, "still there");
    let (s, v) = http_as("DELETE", &url("/v1/objects/tenant/blue"), "", Some(blue));
    assert_eq!((s, code(&v).as_str()), (403, "forbidden"));

    // Status and metrics: its own.
    let (_, st) = http_as("GET", &url("/v1/status"), "", Some(blue));
    let names: Vec<_> = st["tenants"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["blue"], "{st}");
    assert!(st.get("pool").is_none() && st.get("fairness").is_none(), "node-wide sections are the operator's: {st}");
    let (_, st) = http_as("GET", &url("/v1/status"), "", Some(op));
    assert_eq!(st["tenants"].as_array().unwrap().len(), 2);
    // (Once the data plane has published both tenants' figures.)
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let (_, m) = http_as("GET", &url("/metrics"), "", Some(op));
        if m.as_str().is_some_and(|m| m.contains("tenant=\"green\"") && m.contains("tenant=\"blue\"")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, m) = http_as("GET", &url("/metrics"), "", Some(blue));
    let m = m.as_str().unwrap().to_string();
    assert!(m.contains("tenant=\"blue\"") && !m.contains("green"), "{m}");

    // The operator's actions stay the operator's.
    let (s, v) = http_as("POST", &url("/v1/drain"), "", Some(blue));
    assert_eq!((s, code(&v).as_str()), (403, "forbidden"), "{v}");

    // The CLI sends the credential from a flag, the environment or a credentials file.
    let creds = dir.0.join("blue.credentials");
    std::fs::write(&creds, format!("server: {}\ntoken: {blue}\n", d.api)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["get", "nt", "-o", "json", "--credentials"]).arg(&creds).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("blue-count") && !listed.contains("green"), "{listed}");
    let out = Command::new(env!("CARGO_BIN_EXE_snic"))
        .args(["status", "-o", "json", "--server", &d.api])
        .env("SNIC_TOKEN", green)
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && seen.contains("\"green\"") && !seen.contains("blue"), "{seen}");
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["status", "--server", &d.api, "--token", green]).output().unwrap();
    assert!(out.status.success(), "the table too: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["status", "--server", &d.api]).output().unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("401 (unauthenticated)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop(d);
}

/// A tenant with its own credential cannot grow the state past its quotas, call the API
/// without limit, or learn from a refusal whether another tenant's object exists.
#[test]
fn a_tenant_is_held_to_its_quotas_and_api_rate_and_refusals_hide_other_tenants() {
    let dir = TempDir::new("quota");
    let op_file = dir.0.join("operator.token");
    let (op, blue, green) = ("operator-secret-0123456789", "blue-secret-0123456789", "green-secret-0123456789");
    std::fs::write(&op_file, format!("{op}\n")).unwrap();
    let d = start_with(
        &dir.0,
        &format!(
            "auth:\n  operator_token_file: {}\nlimits: {{nts_per_tenant: 2, api_requests_per_s: 0.1, api_burst: 8}}\n",
            op_file.display()
        ),
    );
    let url = |p: &str| format!("{}{p}", d.api);
    let sha = snic_control::auth::token_sha256;
    let tenants = format!(
        "apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: blue}}\nspec: {{vnis: [100], token_sha256: {}}}\n---\n\
         apiVersion: snic/v1\nkind: Tenant\nmetadata: {{name: green}}\nspec: {{vnis: [200], token_sha256: {}, quotas: {{nts: 3}}}}\n---\n\
         apiVersion: snic/v1\nkind: NT\nmetadata: {{name: green-secret}}\nspec: {{tenant: green, config: {{kind: counter}}}}\n",
        sha(blue),
        sha(green)
    );
    let (s, v) = http_as("POST", &url("/v1/apply"), &tenants, Some(op));
    assert_eq!(s, 200, "{v}");
    let nt = |n: &str, t: &str| {
        format!("apiVersion: snic/v1\nkind: NT\nmetadata: {{name: {n}}}\nspec: {{tenant: {t}, config: {{kind: counter}}}}\n---\n")
    };
    let dag = |n: &str| format!("apiVersion: snic/v1\nkind: DAG\nmetadata: {{name: d}}\nspec: {{tenant: blue, nodes: [{n}]}}\n");

    // A reference to green's NT answers as one to an NT that does not exist.
    let (s1, theirs) = http_as("POST", &url("/v1/apply"), &dag("green-secret"), Some(blue));
    let (s2, missing) = http_as("POST", &url("/v1/apply"), &dag("green-secreu"), Some(blue));
    assert_eq!(s1, s2);
    let reason = |v: &serde_json::Value| v["error"]["reason"].as_str().unwrap().replace("green-secret", "X").replace("green-secreu", "X");
    assert_eq!(reason(&theirs), reason(&missing), "{theirs} / {missing}");

    // Quotas: the node's default for blue (2 NTs), green's own (3).
    let (s, v) = http_as("POST", &url("/v1/apply"), &(nt("b1", "blue") + &nt("b2", "blue")), Some(blue));
    assert_eq!(s, 200, "{v}");
    let (s, v) = http_as("POST", &url("/v1/apply"), &nt("b3", "blue"), Some(blue));
    assert_eq!((s, v["error"]["code"].as_str(), v["error"]["field"].as_str()), (409, Some("capacity"), Some("quotas.nts")), "{v}");
    let (s, v) = http_as("POST", &url("/v1/apply"), &(nt("g2", "green") + &nt("g3", "green")), Some(green));
    assert_eq!(s, 200, "green's quota is its own: {v}");

    // The API rate: blue is refused with 429 once its burst is spent; the operator and green
    // are not.
    let mut answered = 0;
    let refused = loop {
        let (s, v) = http_as("GET", &url("/v1/objects/nt"), "", Some(blue));
        if s == 429 {
            break v;
        }
        assert_eq!(s, 200, "{v}");
        answered += 1;
        assert!(answered < 200, "never limited");
    };
    assert_eq!(refused["error"]["code"], "rate_limited", "{refused}");
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let r = agent.get(url("/v1/status")).header("authorization", &format!("Bearer {blue}")).call().unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert!(r.headers().get("retry-after").is_some(), "{:?}", r.headers());
    assert_eq!(http_as("GET", &url("/v1/status"), "", Some(green)).0, 200, "another tenant is served");
    let (s, m) = http_as("GET", &url("/metrics"), "", Some(op));
    assert_eq!(s, 200, "the operator is served");
    let limited = m
        .as_str()
        .unwrap()
        .lines()
        .find(|l| l.starts_with("snic_tenant_api_limited_total{tenant=\"blue\"}"))
        .and_then(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(limited >= 2, "counted: {m}");
    stop(d);
}

#[test]
fn without_credentials_the_api_listens_on_loopback_only_and_says_so() {
    let dir = TempDir::new("noauth");
    let mut d = launch(&dir.0, "", &["--api", "0.0.0.0:0"], Stdio::inherit());
    assert!(d.api.starts_with("http://127.0.0.1:"), "{}", d.api);
    let (s, _) = http("GET", &format!("{}/v1/status", d.api), "");
    assert_eq!(s, 200, "no credentials: every local request is the operator's");
    let _ = d.child.kill();
}

#[test]
fn the_api_serves_https_with_a_configured_certificate() {
    let dir = TempDir::new("tls");
    let (cert, key) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=localhost"])
        // A self-signed server certificate the client trusts directly (not a CA: webpki refuses
        // a CA certificate as a server's).
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (scripts/test.sh installs it)");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let op_file = dir.0.join("operator.token");
    std::fs::write(&op_file, "operator-secret-0123456789").unwrap();
    let d = start_with(
        &dir.0,
        &format!(
            "auth: {{operator_token_file: {}}}\napi_tls: {{cert_file: {}, key_file: {}}}\n",
            op_file.display(),
            cert.display(),
            key.display()
        ),
    );
    assert!(d.api.starts_with("https://127.0.0.1:"), "{}", d.api);
    let snic = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_snic")).args(args).output().unwrap();
    let ca = cert.to_str().unwrap();
    let out = snic(&["status", "-o", "json", "--server", &d.api, "--ca-file", ca, "--token", "operator-secret-0123456789"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The same from a credentials file, whose ca_file is relative to it.
    std::fs::write(dir.0.join("creds.yaml"), format!("server: {}\ntoken: operator-secret-0123456789\nca_file: cert.pem\n", d.api)).unwrap();
    let out = snic(&["get", "tenants", "--credentials", dir.0.join("creds.yaml").to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A client that does not trust the certificate is refused by TLS, and plain HTTP gets nothing.
    let out = snic(&["status", "--server", &d.api, "--token", "operator-secret-0123456789"]);
    assert!(!out.status.success(), "an unknown issuer must not be trusted");
    let plain = d.api.replace("https://", "http://");
    let out = snic(&["status", "--server", &plain, "--token", "operator-secret-0123456789"]);
    assert!(!out.status.success(), "plain HTTP on the TLS port");
    stop(d);
    // A key that is not there stops the node with the setting named.
    let cfg = dir.0.join("bad.yaml");
    std::fs::write(
        &cfg,
        format!(
            "api: 127.0.0.1:0\ndata: 127.0.0.1:0\nstate_dir: {}\napi_tls: {{cert_file: {}, key_file: /nonexistent.pem}}\n",
            dir.0.join("s2").display(),
            cert.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_snic")).args(["run", "--config", cfg.to_str().unwrap()]).output().unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("api_tls.key_file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_node_of_two_dispatcher_threads_spreads_flows_keeps_each_whole_and_counts_it_once() {
    let dir = TempDir::new("cores");
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let g = UdpSocket::bind("127.0.0.1:0").unwrap();
    let d = start_with(&dir.0, "data_cores: 2\n");
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &demo_with_routes(&b, &g));
    assert_eq!(s, 200, "{v}");
    // 64 flows of blue (firewall → source NAT), 5 packets each, a window at a time.
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (flows, each) = (64u16, 5);
    let mut nat_port: HashMap<u16, Vec<u16>> = HashMap::new();
    for f in 0..flows {
        for _ in 0..each {
            a.send_to(&frame(100, L4Spec::Udp { src_port: 4000 + f, dst_port: 5001 }), d.data).unwrap();
        }
        for p in recv_n(&b, each) {
            let k = parse_inner(&p[8..]).unwrap().key;
            assert_eq!(k.src, IpAddr::from([203, 0, 113, 1]), "NATed");
            nat_port.entry(f).or_default().push(k.src_port);
        }
    }
    assert_eq!(nat_port.values().map(Vec::len).sum::<usize>(), usize::from(flows) * each, "every packet delivered once");
    // Each flow kept one mapping (one thread holds it), and both threads' blocks of the NAT's
    // ports (1024–33279, 33280–65535) were used: flows landed on both.
    assert!(nat_port.values().all(|p| p.iter().all(|&x| x == p[0])), "{nat_port:?}");
    let block = |p: u16| usize::from(p >= 33280);
    let mut per_block = [0; 2];
    nat_port.values().for_each(|p| per_block[block(p[0])] += 1);
    assert!(per_block.iter().all(|&n| n >= 8), "flows per thread {per_block:?}");
    // Status adds the threads up: every packet once; both threads' regions ran packets.
    let sent = u64::from(flows) * each as u64;
    let v = status_until(&d.api, |v| tenant_stat(v, "blue", "tx_packets") == sent);
    assert_eq!(tenant_stat(&v, "blue", "tx_packets"), sent, "{v}");
    let ran = |t: u64| {
        v["regions"]["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["thread"] == t && r["chain"][0] == "blue/blue-firewall")
            .map(|r| r["packets"].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(ran(0) + ran(1), sent, "{v}");
    assert!(ran(0) > 0 && ran(1) > 0, "{v}");
    let (_, m) = http("GET", &format!("{}/metrics", d.api), "");
    assert!(m.as_str().unwrap().contains("thread=\"1\""), "region series name their thread");
    // A cache cannot be split between the threads' instances: refused, by name; the node
    // keeps forwarding.
    let kv = include_str!("../../../examples/kv.yaml").replace("blue", "kvt").replace("[100]", "[700]").replace("vni: 100", "vni: 700");
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &kv);
    assert_ne!(s, 200, "{v}");
    assert!(v.to_string().contains("kvt/kvt-cache") && v.to_string().contains("data_cores: 2"), "{v}");
    // A tenant's NAT rules take room in the node's one steering program: at most its part.
    let rules: Vec<String> =
        (0..30).map(|i| format!("{{public: 203.0.113.1, proto: 6, port: {}, to: 10.1.0.9, to_port: 80}}", 8000 + i)).collect();
    let nat = format!(
        "apiVersion: snic/v1\nkind: NT\nmetadata: {{name: blue-nat}}\nspec: {{tenant: blue, config: {{kind: nat, snat: {{inside: 10.1.0.0/24, public: 203.0.113.1}}, dnat: [{}]}}}}\n",
        rules.join(", ")
    );
    let (s, v) = http("POST", &format!("{}/v1/apply", d.api), &nat);
    assert_ne!(s, 200, "{v}");
    assert!(v.to_string().contains("tenant \\\"blue\\\"'s NATs need") && v.to_string().contains("a tenant may use 256"), "{v}");
    assert_eq!(burst(d.data, 100, &b, 50), 50, "blue still forwarded");
    assert_eq!(stop(d), 0);
}
