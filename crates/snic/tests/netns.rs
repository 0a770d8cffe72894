//! Real Linux endpoints (root only): network namespaces attached by kernel VXLAN devices to a
//! snic node in its own namespace, with ping and iperf3 as the traffic. The test creates every
//! namespace, veth and process it uses and removes them all when it ends, pass or fail
//! (`Topo`'s `Drop`). Traffic stays inside the namespaces.
//!
//! These tests are `#[ignore]`d: a plain `cargo test` reports them as ignored, with the reason.
//! `scripts/test.sh` runs them explicitly (`-- --ignored`) when it runs as root, and says so
//! when it does not. Run without root they fail, saying why. They assert what the node does
//! (it forwards, transforms, isolates, holds a flood in its own queue and counts it), never how
//! fast: the machine's speed and load are not theirs to judge.
//!
//! Tenant blue (VNI 100): endpoints A and B, DAG firewall (deny TCP 5202) → SNAT of A to
//! 10.1.0.100. Tenant green (VNI 200): endpoints C and D with the *same* inner addresses, DAG
//! counter. Endpoints turn tx checksum offload off on their underlay veth, so inner TCP
//! checksums are complete when they reach snic (docs/endpoints.md).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Topo {
    prefix: String,
    namespaces: Vec<String>,
    children: Vec<Child>,
    /// The nodes' stderr, shown when the test fails.
    logs: Vec<std::path::PathBuf>,
    state: std::path::PathBuf,
    /// How the node is given its core.
    priority: Priority,
    /// Endpoints keep their transmit offloads (partial checksums, unsegmented TCP bursts).
    offload: bool,
}

/// How a test's node is given its core beside other work.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// `nice -20` in the test's session: ahead of the test's own processes (its senders), not
    /// of CPU hogs started elsewhere where the kernel groups processes by session.
    InSession,
    /// A session of its own whose scheduling autogroup is at nice -20 too (docs/operations.md):
    /// ahead of other sessions' hogs as well — for the tests of how it shares its core, which
    /// say nothing of a node that loses it. (Not for every test: the suite's background builds
    /// would lose the CPU to every node for nothing.)
    OwnGroup,
}

impl Drop for Topo {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        for log in &self.logs {
            if std::thread::panicking() || std::env::var_os("KEEP_LOGS").is_some() {
                // What the node said (a dead data plane says so there).
                eprintln!("{}:\n{}", log.display(), std::fs::read_to_string(log).unwrap_or_default());
            }
            let _ = std::fs::remove_file(log);
        }
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// The operator's token of nodes whose API is reached from other namespaces (an API without
/// credentials listens on loopback only). Every command the tests run carries it
/// (`SNIC_TOKEN`); a node without credentials ignores it.
const OPERATOR_TOKEN: &str = "the operator of the namespace tests";

fn run(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).env("SNIC_TOKEN", OPERATOR_TOKEN).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Topo {
    /// An empty topology named after this process (names are unique per test run).
    fn new(tag: &str) -> Topo {
        let id = std::process::id() % 100_000;
        Topo {
            prefix: format!("sn{tag}{id}"),
            namespaces: Vec::new(),
            children: Vec::new(),
            logs: Vec::new(),
            state: std::env::temp_dir().join(format!("snic-netns-{tag}{id}")),
            priority: Priority::InSession,
            offload: false,
        }
    }

    /// The node and endpoints A, B on VNI 100 (10.1.0.1 and .2) and C, D on VNI 200 (the same
    /// inner addresses), each in every flood list of its VNI, running `manifest`.
    fn four_endpoints(tag: &str, manifest: &str) -> Topo {
        Self::four_endpoints_at(tag, manifest, Priority::InSession)
    }

    /// [`Topo::four_endpoints`] with the node at `priority`.
    fn four_endpoints_at(tag: &str, manifest: &str, priority: Priority) -> Topo {
        let mut t = Topo::new(tag);
        t.priority = priority;
        t.add_ns("node");
        t.endpoint("a", 1, 100, "10.1.0.1/24");
        t.endpoint("b", 2, 100, "10.1.0.2/24");
        t.endpoint("c", 3, 200, "10.1.0.1/24");
        t.endpoint("d", 4, 200, "10.1.0.2/24");
        t.start_node(&format!("{manifest}{}{}{}{}", flood("fa", 100, 1), flood("fb", 100, 2), flood("fc", 200, 3), flood("fd", 200, 4)));
        t
    }

    /// Starts the node in its namespace and applies `manifest` once it answers. The node runs at
    /// `nice -20`, as docs/operations.md says to run one that shares its machine with other
    /// work ("Give the data plane its core"), and for the tests of how it shares its core
    /// ([`Priority::OwnGroup`]) in a session of its own.
    fn start_node(&mut self, manifest: &str) {
        self.start_node_with(manifest, None);
    }

    /// [`Topo::start_node`] with node.yaml `config` (its `data`, `api` and `state_dir` are the
    /// test's: given on the command line).
    fn start_node_with(&mut self, manifest: &str, config: Option<&str>) {
        let state = self.state.to_str().unwrap().to_string();
        let bin = env!("CARGO_BIN_EXE_snic");
        let cf = self.state.with_extension("node-config.yaml");
        let mut run = vec![bin, "run", "--data", "0.0.0.0:4789", "--api", "127.0.0.1:7878", "--state-dir", &state];
        let cf_s = cf.to_str().unwrap().to_string();
        if let Some(c) = config {
            std::fs::write(&cf, c).unwrap();
            self.logs.push(cf.clone());
            run.extend(["--config", &cf_s]);
        }
        let own = self.priority == Priority::OwnGroup;
        let args: Vec<&str> = own.then_some("setsid").into_iter().chain(["nice", "-n", "-20"]).chain(run).collect();
        let i = self.spawn("node", &args);
        if own {
            self.own_group(self.children[i].id());
        }
        wait_for("the node comes up", Duration::from_secs(10), || self.exec_status("node", &[bin, "status"]).status.code() == Some(0));
        self.apply("node", manifest);
    }

    /// Gives process `pid` (started under `setsid`, which execs in place) its session's
    /// scheduling autogroup at nice -20, once it has its session.
    fn own_group(&self, pid: u32) {
        wait_for("the node has its own session", Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                // Fields after the command's ")": state, ppid, pgrp, session.
                st.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(3)).is_some_and(|sid| sid == pid.to_string())
            })
        });
        set_autogroup_nice(pid, -20);
    }

    /// Applies `manifest` to the node in namespace `n`.
    fn apply(&self, n: &str, manifest: &str) {
        let mf = self.state.with_extension(format!("{n}.yaml"));
        std::fs::write(&mf, manifest).unwrap();
        self.snic_in(n, &["apply", "-f", mf.to_str().unwrap()]);
        std::fs::remove_file(&mf).ok();
    }

    /// The node's status from a snapshot the data plane published after `at` (it publishes
    /// every 250 ms).
    fn status_since(&self, at: Instant) -> serde_json::Value {
        let mut s = serde_json::Value::Null;
        wait_for("a status snapshot published since", Duration::from_secs(5), || {
            let waited = at.elapsed().as_millis();
            s = self.status();
            let age = s["data_plane"]["last_update_ms"].as_u64().unwrap_or_else(|| panic!("no snapshot age: {s}")) as u128;
            waited > age + 1
        });
        s
    }

    /// The node's status, as `snic status -o json` prints it.
    fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.snic(&["status", "-o", "json"])).unwrap()
    }

    fn ns(&self, n: &str) -> String {
        format!("{}-{n}", self.prefix)
    }

    /// Runs a command in namespace `n`.
    fn exec(&self, n: &str, args: &[&str]) -> String {
        let ns = self.ns(n);
        let mut v = vec!["ip", "netns", "exec", ns.as_str()];
        v.extend_from_slice(args);
        run(&v)
    }

    fn exec_status(&self, n: &str, args: &[&str]) -> std::process::Output {
        Command::new("ip").args(["netns", "exec", &self.ns(n)]).args(args).env("SNIC_TOKEN", OPERATOR_TOKEN).output().unwrap()
    }

    /// Starts `args` in namespace `n`; its index among the children, for `kill`. The stderr
    /// of snic (a node, the ToR's health checker) is kept for a failure's report.
    fn spawn(&mut self, n: &str, args: &[&str]) -> usize {
        // (The node's log is kept, also when it runs under `nice`.)
        let err = if args.contains(&env!("CARGO_BIN_EXE_snic")) {
            let log = self.state.with_extension(format!("{n}.{}.log", self.children.len()));
            let f = std::fs::File::create(&log).unwrap();
            self.logs.push(log);
            Stdio::from(f)
        } else {
            Stdio::null()
        };
        // `ip netns exec` execs the command: the child's PID is the command's.
        let c = Command::new("ip").args(["netns", "exec", &self.ns(n)]).args(args).stdout(Stdio::null()).stderr(err).spawn().unwrap();
        self.children.push(c);
        self.children.len() - 1
    }

    /// Kills child `i` (SIGKILL) and reaps it.
    fn kill(&mut self, i: usize) {
        let c = &mut self.children[i];
        c.kill().unwrap();
        c.wait().unwrap();
    }

    fn add_ns(&mut self, n: &str) {
        let ns = self.ns(n);
        run(&["ip", "netns", "add", &ns]);
        self.namespaces.push(ns);
        self.exec(n, &["ip", "link", "set", "lo", "up"]);
    }

    /// An endpoint: veth to the node (192.168.i.0/24), kernel VXLAN `vx0` on `vni` with `inner`.
    fn endpoint(&mut self, n: &str, i: u8, vni: u32, inner: &str) {
        self.add_ns(n);
        let dev = self.veth(n, "node", &format!("192.168.{i}"), 1500);
        self.vxlan(n, &dev, vni, &format!("192.168.{i}.1"), &format!("192.168.{i}.2"), inner, "learning");
    }

    /// A veth pair between namespaces `n` (`{net}.2/24`) and `to` (`{net}.1/24`), both up, with
    /// `mtu`; transmit checksum offload off on `n`'s side unless the topology keeps endpoints'
    /// offloads, GRO on on `to`'s (the node's receiving interface: runs arrive coalesced;
    /// docs/endpoints.md). `n`'s device.
    fn veth(&mut self, n: &str, to: &str, net: &str, mtu: u32) -> String {
        let (en, ee) = (format!("{}{n}n", self.prefix), format!("{}{n}e", self.prefix));
        let mtu = mtu.to_string();
        run(&["ip", "link", "add", &en, "mtu", &mtu, "type", "veth", "peer", "name", &ee, "mtu", &mtu]);
        run(&["ip", "link", "set", &en, "netns", &self.ns(to)]);
        run(&["ip", "link", "set", &ee, "netns", &self.ns(n)]);
        self.exec(to, &["ip", "addr", "add", &format!("{net}.1/24"), "dev", &en]);
        self.exec(to, &["ip", "link", "set", &en, "up"]);
        self.exec(to, &["ethtool", "-K", &en, "gro", "on"]);
        self.exec(n, &["ip", "addr", "add", &format!("{net}.2/24"), "dev", &ee]);
        self.exec(n, &["ip", "link", "set", &ee, "up"]);
        if !self.offload {
            self.exec(n, &["ethtool", "-K", &ee, "tx", "off"]);
        }
        ee
    }

    /// Endpoints A, B on VNI 100 (10.1.0.1 and .2) and C, D on VNI 200 (the same inner
    /// addresses), each behind the router namespace `tor` (10.0.11–14.2, their gateway .1),
    /// their kernel VXLAN pointed at `remote` (one node, or the pool's anycast address). A TCP
    /// connection keeps its hash, so its VXLAN source port, so the node a switch sends it to,
    /// through a retransmission timeout (docs/pool.md, "Behind a switch").
    fn routed_endpoints(&mut self, remote: &str) {
        for (n, i, vni, inner) in
            [("a", 11, 100, "10.1.0.1/24"), ("b", 12, 100, "10.1.0.2/24"), ("c", 13, 200, "10.1.0.1/24"), ("d", 14, 200, "10.1.0.2/24")]
        {
            self.add_ns(n);
            let dev = self.veth(n, "tor", &format!("10.0.{i}"), 1500);
            self.exec(n, &["ip", "route", "add", "default", "via", &format!("10.0.{i}.1")]);
            self.vxlan(n, &dev, vni, remote, &format!("10.0.{i}.2"), inner, "nolearning");
            self.exec(n, &["sysctl", "-qw", "net.core.txrehash=0"]);
        }
    }

    /// An endpoint on the switch namespace `sw`'s bridge (192.168.50.{10+i}/24; the node is
    /// 192.168.50.1 on the same bridge): kernel VXLAN `vx0` on `vni` with `inner`, to the node.
    fn bridged_endpoint(&mut self, n: &str, i: u8, vni: u32, inner: &str) {
        self.add_ns(n);
        let dev = self.bridge_port(n, &format!("192.168.50.{}", 10 + i));
        self.vxlan(n, &dev, vni, "192.168.50.1", &format!("192.168.50.{}", 10 + i), inner, "learning");
    }

    /// A veth from namespace `n` (with `ip`/24) to the bridge `br0` of namespace `sw` (made
    /// with it if needed); `n`'s device.
    fn bridge_port(&mut self, n: &str, ip: &str) -> String {
        if !self.namespaces.contains(&self.ns("sw")) {
            self.add_ns("sw");
            self.exec("sw", &["ip", "link", "add", "br0", "type", "bridge"]);
            self.exec("sw", &["ip", "link", "set", "br0", "up"]);
        }
        let (en, ee) = (format!("{}{n}b", self.prefix), format!("{}{n}e", self.prefix));
        run(&["ip", "link", "add", &ee, "type", "veth", "peer", "name", &en]);
        run(&["ip", "link", "set", &en, "netns", &self.ns("sw")]);
        run(&["ip", "link", "set", &ee, "netns", &self.ns(n)]);
        self.exec("sw", &["ip", "link", "set", &en, "master", "br0", "up"]);
        self.exec(n, &["ip", "addr", "add", &format!("{ip}/24"), "dev", &ee]);
        self.exec(n, &["ip", "link", "set", &ee, "up"]);
        if !self.offload {
            self.exec(n, &["ethtool", "-K", &ee, "tx", "off"]);
        }
        ee
    }

    /// Kernel VXLAN device `vx0` in `n` over `dev`, on `vni`, to the node at `remote`, with
    /// address `inner`; `learning` or `nolearning` (then replies always go to `remote`, whoever
    /// delivered the request).
    #[allow(clippy::too_many_arguments)]
    fn vxlan(&mut self, n: &str, dev: &str, vni: u32, remote: &str, local: &str, inner: &str, learning: &str) {
        let vni = vni.to_string();
        let link =
            ["ip", "link", "add", "vx0", "type", "vxlan", "id", &vni, "remote", remote, "local", local, "dstport", "4789", "dev", dev];
        let mut args = link.to_vec();
        args.push(learning);
        self.exec(n, &args);
        self.exec(n, &["ip", "addr", "add", inner, "dev", "vx0"]);
        self.exec(n, &["ip", "link", "set", "vx0", "up"]);
    }

    fn mac(&self, n: &str) -> String {
        let out = self.exec(n, &["ip", "link", "show", "vx0"]);
        out.split_whitespace().skip_while(|w| *w != "link/ether").nth(1).unwrap().to_string()
    }

    fn rx_packets(&self, n: &str) -> u64 {
        self.exec(n, &["cat", "/sys/class/net/vx0/statistics/rx_packets"]).trim().parse().unwrap()
    }

    /// Waits until TCP `ports` listen in namespace `n` (a server just started).
    fn listening(&self, n: &str, ports: &[u16]) {
        for p in ports {
            let filter = format!("sport = :{p}");
            wait_for(&format!("a server listens on {n}:{p}"), Duration::from_secs(10), || {
                let out = self.exec_status(n, &["ss", "-Hltn", &filter]);
                out.status.success() && !out.stdout.is_empty()
            });
        }
    }

    fn snic(&self, args: &[&str]) -> String {
        self.snic_in("node", args)
    }

    /// Runs `snic args` in namespace `n`.
    fn snic_in(&self, n: &str, args: &[&str]) -> String {
        let mut v = vec![env!("CARGO_BIN_EXE_snic")];
        v.extend_from_slice(args);
        self.exec(n, &v)
    }
}

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

/// The preconditions of a namespace test: root, and the tools it drives. A test run without
/// them fails with the reason (it never passes without having run).
fn require_root_and(tools: &[&str]) {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "needs root to create network namespaces (scripts/test.sh runs this as root)");
    for tool in tools {
        assert!(have(tool), "{tool} is missing: scripts/test.sh installs it (iproute2, ethtool, iputils-ping, iperf3)");
    }
}

/// Polls `ok` every 20 ms until it holds; fails with `what` after `limit`.
fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const MANIFEST: &str = r#"
apiVersion: snic/v1
kind: Tenant
metadata: {name: blue}
spec: {vnis: [100]}
---
apiVersion: snic/v1
kind: Tenant
metadata: {name: green}
spec: {vnis: [200]}
---
apiVersion: snic/v1
kind: NT
metadata: {name: blue-fw}
spec: {tenant: blue, config: {kind: firewall, default: allow, rules: [{proto: 6, dst_ports: {lo: 5202, hi: 5202}, action: deny}]}}
---
apiVersion: snic/v1
kind: NT
metadata: {name: blue-nat}
spec: {tenant: blue, config: {kind: nat, snat: {inside: 10.1.0.1/32, public: 10.1.0.100}}}
---
apiVersion: snic/v1
kind: NT
metadata: {name: green-count}
spec: {tenant: green, config: {kind: counter}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: blue-edge}
spec: {tenant: blue, nodes: [blue-fw, blue-nat]}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: green-path}
spec: {tenant: green, nodes: [green-count]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: blue-all}
spec: {vni: 100, action: {dag: blue-edge}}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: green-all}
spec: {vni: 200, action: {dag: green-path}}
"#;

fn flood(name: &str, vni: u32, i: u8) -> String {
    format!("---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: {name}}}\nspec: {{vni: {vni}, vtep: '192.168.{i}.2:4789', flood: true}}\n")
}

/// Blue's TCP and UDP from A to B through its firewall and NAT: iperf3 streams get through, B
/// sees them from the NAT's address, and TCP 5202 stays blocked.
fn blue_tcp_and_udp_get_through_firewall_and_nat(t: &mut Topo) {
    let state = t.state.to_str().unwrap().to_string();
    t.spawn("b", &["iperf3", "-s", "-p", "5201", "--logfile", &format!("{state}-iperf.log")]);
    t.spawn("b", &["iperf3", "-s", "-p", "5202"]);
    t.listening("b", &[5201, 5202]);
    let out = t.exec("a", &["iperf3", "-c", "10.1.0.2", "-p", "5201", "-t", "2", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["end"]["sum_received"]["bytes"].as_f64().unwrap() > 1e6, "TCP through firewall and NAT: {v}");
    let out = t.exec(
        "a",
        &["timeout", "-s", "KILL", "30", "iperf3", "-c", "10.1.0.2", "-p", "5201", "-u", "-b", "10M", "-l", "1000", "-t", "1", "-J"],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["end"]["sum"]["lost_percent"].as_f64().is_some_and(|l| l < 50.0), "UDP through firewall and NAT: {v}");
    let log = std::fs::read_to_string(format!("{state}-iperf.log")).unwrap_or_default();
    std::fs::remove_file(format!("{state}-iperf.log")).ok();
    assert!(log.contains("Accepted connection from 10.1.0.100"), "the receiver saw the NATed source: {log}");
    let r = t.exec_status("a", &["iperf3", "-c", "10.1.0.2", "-p", "5202", "-t", "1", "--connect-timeout", "1500"]);
    assert!(!r.status.success(), "TCP 5202 must be blocked");
}

/// The namespace tests run one at a time: each drives iperf3 flat out through a debug build on
/// a two-core machine, and the loss figures one asserts on mean nothing while the other
/// saturates the same cores (the UDP stream's loss figure went missing under that contention).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Blue's endpoints A and B keeping their transmit offloads, through a node started with
/// node.yaml `config` (with `egress_tap`, in a namespace that forwards and does no
/// reverse-path check, as the tap needs): A reaches B, and B knows where the NAT's address is.
fn offloading_endpoints(tag: &str, config: Option<&str>) -> Topo {
    let mut t = Topo::new(tag);
    t.offload = true;
    t.add_ns("node");
    if config.is_some_and(|c| c.contains("egress_tap")) {
        t.exec("node", &["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0"]);
    }
    t.endpoint("a", 1, 100, "10.1.0.1/24");
    t.endpoint("b", 2, 100, "10.1.0.2/24");
    t.start_node_with(&format!("{MANIFEST}{}{}", flood("fa", 100, 1), flood("fb", 100, 2)), config);
    let amac = t.mac("a");
    t.exec("b", &["ip", "neigh", "add", "10.1.0.100", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);
    let out = t.exec("a", &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains("3 received"), "{out}");
    t
}

#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn endpoints_that_keep_their_offloads_get_through_firewall_and_nat() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "ping", "iperf3"]);
    // Transmit offloads on, as endpoints have them by default: every TCP and UDP packet
    // arrives with its inner checksum partial, and TCP bursts unsegmented (one datagram each).
    let mut t = offloading_endpoints("o", None);
    blue_tcp_and_udp_get_through_firewall_and_nat(&mut t);
    // The bursts came unsegmented (or coalesced) and left cut: more datagrams than messages,
    // none dropped for its size.
    let v = t.status();
    let (msgs, dgrams) = (v["receive"]["messages"].as_u64().unwrap(), v["receive"]["datagrams"].as_u64().unwrap());
    assert!(dgrams > 2 * msgs, "{dgrams} datagrams in {msgs} messages");
    let blue = v["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "blue").unwrap()["stats"].clone();
    assert!(!blue["drops"].as_array().unwrap().iter().any(|d| d[0] == "oversize"), "{blue}");
    assert!(!v["unattributed_drops"].as_array().unwrap().iter().any(|d| d[0] == "oversize"), "{v}");
}

#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn a_node_with_an_egress_tap_sends_tcp_runs_whole_through_firewall_and_nat() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "ping", "iperf3", "sysctl"]);
    // Endpoints keep their offloads (TCP bursts arrive whole, are cut, run through the
    // firewall and NAT segment by segment) and the node joins each run back into one packet
    // for the tap, which the kernel carries whole to B (docs/dataplane.md, "Sending runs whole").
    let mut t = offloading_endpoints("g", Some("egress_tap: snictap0\n"));
    // Through the firewall and the NAT as without the tap: B sees the NAT's address, TCP 5202
    // stays blocked, UDP gets through (out of the socket: only TCP runs join).
    blue_tcp_and_udp_get_through_firewall_and_nat(&mut t);
    let v = t.status();
    let joined = &v["transmit"]["joined"];
    let (writes, dgrams) = (joined["writes"].as_u64().unwrap(), joined["datagrams"].as_u64().unwrap());
    assert!(writes > 0 && dgrams >= 2 * writes, "runs left whole through the tap: {joined}");
    // B's TCP took packets larger than one segment: the bursts reached it whole.
    let big = t.exec("b", &["ip", "-s", "-s", "link", "show", "vx0"]);
    let rx_bytes_per_packet = {
        let line = big.lines().skip_while(|l| !l.trim_start().starts_with("RX:")).nth(1).unwrap_or("").to_string();
        let f: Vec<f64> = line.split_whitespace().take(2).filter_map(|x| x.parse().ok()).collect();
        if f.len() == 2 && f[1] > 0.0 {
            f[0] / f[1]
        } else {
            0.0
        }
    };
    assert!(rx_bytes_per_packet > 3000.0, "B's VXLAN device took super-packets ({rx_bytes_per_packet:.0} bytes a packet): {big}");
    let blue = v["tenants"].as_array().unwrap().iter().find(|t| t["name"] == "blue").unwrap()["stats"].clone();
    assert!(!blue["drops"].as_array().unwrap().iter().any(|d| d[0] == "tx_error"), "{blue}");
}

#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn two_dispatcher_threads_carry_kernel_vxlan_endpoints_through_firewall_and_nat() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "ping", "iperf3"]);
    let mut t = Topo::new("m");
    t.add_ns("node");
    t.endpoint("a", 1, 100, "10.1.0.1/24");
    t.endpoint("b", 2, 100, "10.1.0.2/24");
    t.start_node_with(&format!("{MANIFEST}{}{}", flood("fa", 100, 1), flood("fb", 100, 2)), Some("data_cores: 2\n"));
    let amac = t.mac("a");
    t.exec("b", &["ip", "neigh", "add", "10.1.0.100", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);
    let out = t.exec("a", &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains("3 received"), "{out}");
    // Eight TCP connections from consecutive ports, which the steering rule's hash puts half on
    // each thread, each source-NATed by the thread it landed on; their ACKs (to the NAT's
    // address and port, another outer and inner hash) must reach that thread, or the
    // connection stalls.
    t.spawn("b", &["iperf3", "-s", "-p", "5203"]);
    t.listening("b", &[5203]);
    let out = t.exec("a", &["iperf3", "-c", "10.1.0.2", "-p", "5203", "-t", "2", "-P", "8", "--cport", "40000", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let streams = v["end"]["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 8, "{v}");
    assert!(streams.iter().all(|s| s["receiver"]["bytes"].as_f64().unwrap() > 1e5), "every connection carried data: {v}");
    blue_tcp_and_udp_get_through_firewall_and_nat(&mut t);
    // Both threads ran blue's chain.
    let v = t.status();
    let ran = |k: u64| {
        v["regions"]["instances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["thread"] == k && r["chain"][0] == "blue/blue-fw")
            .map(|r| r["packets"].as_u64().unwrap())
            .sum::<u64>()
    };
    assert!(ran(0) > 1000 && ran(1) > 1000, "thread 0 ran {}, thread 1 {}: {v}", ran(0), ran(1));
}

#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn kernel_vxlan_endpoints_through_firewall_and_nat() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "ping", "iperf3"]);
    // Green's path costs 20 µs a packet of real CPU time (at most ≈ 40 kpps of the node's core
    // at its 80% target), so that its flood below is over what the node can serve on any
    // machine: with a counter alone, a fast node drained the flood and held nothing back.
    // (At 100 µs too. Blue lost a few packets in its own receive queue during the flood, 1 run
    // in 8–15, until the demand estimate stopped reading its bursts as rates: issue 50,
    // docs/testing.md.)
    let manifest = MANIFEST.replace("nodes: [green-count]", "nodes: [green-count, green-slow]");
    assert_ne!(manifest, MANIFEST);
    let slow = "---\napiVersion: snic/v1\nkind: NT\nmetadata: {name: green-slow}\nspec: {tenant: green, config: {kind: synthetic, cost_ns: 20000}}\n";
    let mut t = Topo::four_endpoints("", &format!("{manifest}{slow}"));
    let state = t.state.to_str().unwrap().to_string();
    // The SNAT address lives on an L2 overlay: B needs to know where it is.
    let amac = t.mac("a");
    t.exec("b", &["ip", "neigh", "add", "10.1.0.100", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);

    // Traffic arrives (ping through the firewall and the NAT, both ways).
    let out = t.exec("a", &["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains("5 received"), "{out}");

    // Green, same inner addresses, other VNI: works, and sees nothing of blue.
    let out = t.exec("c", &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains("3 received"), "{out}");
    let d_before = t.rx_packets("d");

    // NAT rewrites, seen at the receiver: iperf3's server reports the peer address.
    t.spawn("b", &["iperf3", "-s", "-1", "-p", "5201", "--logfile", &format!("{state}-iperf.log")]);
    t.spawn("b", &["iperf3", "-s", "-p", "5202"]);
    t.listening("b", &[5201, 5202]);
    // Green keeps pinging while blue pushes TCP: not disturbed.
    let green =
        Command::new("ip").args(["netns", "exec", &t.ns("c"), "ping", "-c", "20", "-i", "0.1", "-W", "2", "10.1.0.2"]).output().unwrap();
    let out = t.exec("a", &["iperf3", "-c", "10.1.0.2", "-p", "5201", "-t", "2", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let bytes = v["end"]["sum_received"]["bytes"].as_f64().unwrap();
    assert!(bytes > 0.0, "blue TCP through firewall and NAT: {v}");
    let log = std::fs::read_to_string(format!("{state}-iperf.log")).unwrap_or_default();
    std::fs::remove_file(format!("{state}-iperf.log")).ok();
    assert!(log.contains("Accepted connection from 10.1.0.100"), "the receiver saw the NATed source: {log}");
    let green = String::from_utf8_lossy(&green.stdout);
    assert!(green.contains("20 received"), "green undisturbed: {green}");
    let d_after = t.rx_packets("d");
    assert!(d_after - d_before <= 30, "green's D saw blue's traffic: {} packets", d_after - d_before);

    // The firewall really blocks TCP 5202.
    let r = t.exec_status("a", &["iperf3", "-c", "10.1.0.2", "-p", "5202", "-t", "1", "--connect-timeout", "1500"]);
    assert!(!r.status.success(), "TCP 5202 must be blocked");

    let status = t.snic(&["status", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let tenant = |n: &str| v["tenants"].as_array().unwrap().iter().find(|t| t["name"] == n).unwrap()["stats"].clone();
    let blue = tenant("blue");
    assert!(blue["drops"].as_array().unwrap().iter().any(|d| d[0] == "firewall_deny"), "{blue}");
    assert!(tenant("green")["drops"].as_array().unwrap().is_empty(), "green dropped nothing");
    // The TCP runs reached the node coalesced (GRO on its interfaces), and were carried whole.
    let (msgs, dgrams) = (v["receive"]["messages"].as_u64().unwrap(), v["receive"]["datagrams"].as_u64().unwrap());
    assert!(dgrams > 2 * msgs, "runs arrive coalesced: {dgrams} datagrams in {msgs} messages");

    // Fair sharing for real traffic: blue sends a steady UDP stream, first alone, then while
    // green floods small UDP packets as fast as its endpoint can. Green is limited at the
    // node's ingress and blue keeps its stream.
    let blue_udp = |t: &Topo| -> f64 {
        // Bounded: under the flood an iperf3 client has been seen to spin for minutes waiting
        // for its end-of-test exchange; then the test fails instead of hanging CI.
        let out = t.exec(
            "a",
            &["timeout", "-s", "KILL", "30", "iperf3", "-c", "10.1.0.2", "-p", "5201", "-u", "-b", "20M", "-l", "1000", "-t", "3", "-J"],
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["end"]["sum"]["lost_percent"].as_f64().unwrap_or_else(|| panic!("iperf3 reported no loss figure: {}", v["error"]))
    };
    // Held back at ingress: over its limit at admission, or — with a receive queue per tenant,
    // the node's default — left in its own queue, where the kernel drops what does not fit.
    // (Alone, a flood is served as fast as the node can and is not limited: limits protect
    // other tenants, `snic_core::fair`. It is limited once blue sends too.)
    let rate_limited = |t: &Topo| -> (u64, u64) {
        let v: serde_json::Value = serde_json::from_str(&t.snic(&["status", "-o", "json"])).unwrap();
        let n = |name: &str| {
            let s = &v["tenants"].as_array().unwrap().iter().find(|x| x["name"] == name).unwrap()["stats"];
            let drops = s["drops"].as_array().unwrap();
            drops.iter().filter(|d| d[0] == "rate_limit" || d[0] == "rx_queue_full").map(|d| d[1].as_u64().unwrap()).sum()
        };
        (n("blue"), n("green"))
    };
    t.spawn("b", &["iperf3", "-s", "-p", "5201"]);
    t.spawn("d", &["iperf3", "-s", "-p", "5301"]);
    t.listening("b", &[5201]);
    t.listening("d", &[5301]);
    let alone = blue_udp(&t);
    let blue_dropped = |t: &Topo| -> u64 {
        let v: serde_json::Value = serde_json::from_str(&t.snic(&["status", "-o", "json"])).unwrap();
        let blue = v["tenants"].as_array().unwrap().iter().find(|x| x["name"] == "blue").unwrap()["stats"].clone();
        blue["drops"].as_array().unwrap().iter().filter(|d| d[0] != "firewall_deny").map(|d| d[1].as_u64().unwrap()).sum()
    };
    let green_rx = |t: &Topo| stats(&t.status(), "green")["rx_packets"].as_u64().unwrap();
    let green_base = green_rx(&t);
    // (Long enough to outlast the wait and blue's stream on a loaded machine, where iperf3
    // takes seconds to start.)
    t.spawn(
        "c",
        &["timeout", "-s", "KILL", "30", "iperf3", "-c", "10.1.0.2", "-p", "5301", "-u", "-b", "2G", "-l", "64", "-t", "12", "-P", "2"],
    );
    // The flood is on once the node has received a few thousand of its packets (the status is
    // published every 250 ms).
    wait_for("green's flood reaches the node", Duration::from_secs(10), || green_rx(&t) > green_base + 2_000);
    // How many epochs blue ended limited, and its fair share (to say why, when it was).
    let blue_fair = |t: &Topo| stats_fair(&t.status(), "blue");
    let (before, blue_before, fair_before) = (rate_limited(&t), blue_dropped(&t), blue_fair(&t));
    let flooded = blue_udp(&t);
    let (after, blue_after, fair_after) = (rate_limited(&t), blue_dropped(&t), blue_fair(&t));
    let limited = |f: &serde_json::Value| f["limited_epochs"].as_u64().unwrap();
    // (A tenant within its share may still end a few epochs limited: the kernel's receive path,
    // overloaded by the flood, hands the node blue's packets in bursts of dozens, over its share
    // for a millisecond or two. Its bucket and its own queue absorb them; it loses nothing.)
    let epochs = limited(&fair_after) - limited(&fair_before);
    let why = format!("blue ended {epochs} epochs limited; its fair share before {fair_before}, after {fair_after}");
    eprintln!("blue loss alone {alone}%, with green flooding {flooded}%; held back (blue, green) {before:?} -> {after:?}; {why}");
    assert!(after.1 > before.1, "green's flood is held back at the node's ingress and counted: {before:?} -> {after:?}");
    assert_eq!(after.0, before.0, "blue, within its share, is not limited: {why}");
    assert_eq!(blue_after, blue_before, "the node dropped none of blue's packets during the flood: {why}");
    assert!(flooded < 100.0, "blue's stream is served during the flood: {flooded}% lost");
}

/// Sends, from its namespace, one VXLAN datagram (VNI 100) of a 10.1.0.1 → 10.1.0.2:9999 UDP
/// packet with `payload` bytes between inner MACs argv[1] → argv[2], to the node at argv[3],
/// fragmented by the sender's kernel (the route to the node has a smaller MTU than the datagram).
const SEND_FRAGMENTED: &str = r#"
import socket, struct, sys
src, dst = (bytes.fromhex(m.replace(':', '')) for m in sys.argv[1:3])
node, payload = sys.argv[3], int(sys.argv[4])
def csum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
data = b'F' * payload
udp = struct.pack('!HHHH', 40000, 9999, 8 + len(data), 0) + data
ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, socket.inet_aton('10.1.0.1'), socket.inet_aton('10.1.0.2'))
ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 0)  # IP_MTU_DISCOVER = IP_PMTUDISC_DONT: fragment
s.sendto(struct.pack('!II', 0x08000000, 100 << 8) + dst + src + b'\x08\x00' + ip + udp, (node, 4789))
"#;

/// The AF_XDP backend (`io: {af_xdp: ...}`, native XDP on the node's veth): kernel VXLAN
/// endpoints behind a bridge, through blue's firewall → NAT. Ping, TCP and UDP get through and
/// are rewritten; the firewall still blocks; the kernel still answers the node's ARP and ping
/// (the XDP program takes only VXLAN to the node); an outer datagram the sender fragmented is
/// reassembled by the kernel and delivered through the UDP socket beside the AF_XDP socket.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn an_af_xdp_node_carries_kernel_vxlan_endpoints_through_firewall_and_nat() {
    if !cfg!(feature = "af_xdp") {
        panic!("needs the AF_XDP backend: run with --features snic/af_xdp (scripts/test.sh does)");
    }
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "ping", "iperf3", "python3"]);
    let mut t = Topo::new("x");
    t.add_ns("node");
    let dev = t.bridge_port("node", "192.168.50.1");
    t.bridged_endpoint("a", 1, 100, "10.1.0.1/24");
    t.bridged_endpoint("b", 2, 100, "10.1.0.2/24");
    let routes: String = [(1, "fa"), (2, "fb")]
        .iter()
        .map(|(i, n)| format!("---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: {n}}}\nspec: {{vni: 100, vtep: '192.168.50.{}:4789', flood: true}}\n", 10 + i))
        .collect();
    let config = format!("rx_queues: shared\nio: {{af_xdp: {{interface: {dev}, queue: 0, mode: native}}}}\n");
    t.start_node_with(&format!("{MANIFEST}{routes}"), Some(&config));
    let out = t.exec("node", &["ip", "link", "show", &dev]);
    assert!(out.contains(" xdp "), "the program is attached in native mode: {out}");
    let (amac, bmac) = (t.mac("a"), t.mac("b"));
    t.exec("b", &["ip", "neigh", "add", "10.1.0.100", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);

    let out = t.exec("a", &["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains("5 received"), "{out}");
    // The node's own address is the kernel's: ARP and ICMP pass the XDP program.
    t.exec("a", &["ip", "neigh", "flush", "dev", &format!("{}ae", t.prefix)]);
    let out = t.exec("a", &["ping", "-c", "2", "-i", "0.2", "-W", "2", "192.168.50.1"]);
    assert!(out.contains("2 received"), "{out}");
    let node_mac = t.exec("node", &["cat", &format!("/sys/class/net/{dev}/address")]);
    let neigh = t.exec("a", &["ip", "neigh", "show", "192.168.50.1"]);
    assert!(neigh.contains(node_mac.trim()), "A resolved the node's address by ARP: {neigh}");

    blue_tcp_and_udp_get_through_firewall_and_nat(&mut t);

    // An outer IP packet of 1,458 bytes over a 1,400-byte route: two fragments, which the XDP
    // program leaves to the kernel.
    t.exec("a", &["ip", "route", "add", "192.168.50.1/32", "dev", &format!("{}ae", t.prefix), "mtu", "lock", "1400"]);
    let script = t.state.with_extension("frag.py");
    std::fs::write(&script, SEND_FRAGMENTED).unwrap();
    let listen = "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('10.1.0.2', 9999)); s.settimeout(10); \
                  d, a = s.recvfrom(4000); print(len(d), a[0])";
    let rx = Command::new("ip").args(["netns", "exec", &t.ns("b"), "python3", "-c", listen]).stdout(Stdio::piped()).spawn().unwrap();
    wait_for("B listens on UDP 9999", Duration::from_secs(10), || t.exec_status("b", &["ss", "-Hlun", "sport = :9999"]).stdout.len() > 1);
    t.exec("a", &["python3", script.to_str().unwrap(), &amac, &bmac, "192.168.50.1", "1380"]);
    let got = rx.wait_with_output().unwrap();
    std::fs::remove_file(&script).ok();
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "1380 10.1.0.100", "the reassembled datagram went through the NAT to B");

    let v = t.status_since(Instant::now());
    let blue = stats(&v, "blue");
    assert!(blue["drops"].as_array().unwrap().iter().any(|d| d[0] == "firewall_deny"), "{blue}");
    // The stream came through the AF_XDP socket, the fragmented datagram through the kernel.
    let (frames, via_kernel) = (v["receive"]["messages"].as_u64().unwrap(), v["receive"]["via_kernel"].as_u64().unwrap());
    assert!(via_kernel >= 1 && frames > 1000 + via_kernel, "{frames} frames received, {via_kernel} of them through the kernel: {v}");
}

/// The two-node encrypted VPC of `scripts/bench-vpc.sh`, with short windows: every path (snic's
/// firewall → NAT → AES-GCM across two nodes, the kernel references with and without offloads,
/// the socat reference, snic's one-node firewall → NAT (through its socket, and with
/// `egress_tap`), Open vSwitch's userspace datapath doing
/// the same) must carry TCP and ping. The script creates and deletes its own namespaces and
/// stops the daemons it starts.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn two_node_vpc_through_encryption() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ethtool", "ping", "iperf3", "ovs-vswitchd"]);
    // The README tour's endpoints: a VXLAN MTU of 1500 on 1500-byte links (issue 49). The
    // nodes' datagrams (the encrypted ones 32 bytes more) exceed the links' MTU: fragmented,
    // none refused, and TCP carries.
    let (rows, stdout) = bench_script("bench-vpc.sh", &["1"], &[("VPC_ENDPOINT_MTU", "1500")]);
    let row = |path: &str| rows.iter().find(|r| r["path"] == path).unwrap_or_else(|| panic!("no {path} row: {stdout}"));
    // Seven paths (the one node's twice: through its socket, and with its TCP runs whole
    // through a tap), the MTU line, the one node's CPU and joined lines for each, the ratios.
    assert_eq!(rows.len(), 13, "{stdout}");
    for p in ["snic-1node-fw-nat-cpu", "snic-1node-fw-nat-tap-cpu"] {
        assert!(row(p)["cpu_us_per_datagram"].as_f64().is_some_and(|c| c > 0.0), "{stdout}");
    }
    assert_eq!(row("snic-1node-fw-nat-joined")["writes"], 0, "{stdout}");
    assert!(row("snic-1node-fw-nat-tap-joined")["writes"].as_u64().is_some_and(|w| w > 0), "{stdout}");
    let ratios = &rows.last().expect("rows")["ratios"];
    assert!(ratios["snic-1node-fw-nat/ovs"].as_f64().is_some_and(|r| r > 0.0), "{stdout}");
    let paths = [
        "snic-2node-fw-nat-aesgcm",
        "kernel-router-nft-fw-nat",
        "kernel-router-per-packet",
        "socat-relay-no-processing",
        "snic-1node-fw-nat",
        "snic-1node-fw-nat-tap",
        "ovs-userspace-fw-nat",
    ];
    for p in paths {
        let r = row(p);
        assert!(r.get("error").is_none(), "{r}");
        assert!(r["iperf3_tcp_gbps"].as_f64().unwrap() > 0.0, "every path carries TCP: {r}");
    }
    assert_eq!(rows[0]["path"], "snic-2node-fw-nat-aesgcm");
    let mtu = row("snic-mtu");
    assert_eq!((mtu["ping_1422_df_of_5"].as_u64(), mtu["tx_error"].as_u64()), (Some(5), Some(0)), "{mtu}");
}

/// Runs `scripts/<script>` with `args` and `env` on this build's snic (`SNIC_BIN`); it must
/// succeed. Returns its JSON lines and its whole output.
fn bench_script(script: &str, args: &[&str], env: &[(&str, &str)]) -> (Vec<serde_json::Value>, String) {
    let path = format!("{}/../../scripts/{script}", env!("CARGO_MANIFEST_DIR"));
    let out =
        Command::new("bash").arg(path).args(args).env("SNIC_BIN", env!("CARGO_BIN_EXE_snic")).envs(env.iter().copied()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let rows = stdout.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    (rows, stdout)
}

/// `name`'s fair share in a status.
fn stats_fair(status: &serde_json::Value, name: &str) -> serde_json::Value {
    stats(status, name)["fair"].clone()
}

/// `name`'s stats in a status.
fn stats<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    &status["tenants"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no tenant {name}: {status}"))
        ["stats"]
}

/// Sets the scheduling autogroup of process `pid` (its session's) to `nice`, where the kernel
/// has autogroups (`/proc/sys/kernel/sched_autogroup_enabled`); elsewhere nothing to do.
fn set_autogroup_nice(pid: u32, nice: i32) {
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled").is_ok_and(|v| v.trim() == "1");
    if enabled {
        std::fs::write(format!("/proc/{pid}/autogroup"), nice.to_string())
            .unwrap_or_else(|e| panic!("setting the node's autogroup nice to {nice}: {e}"));
    }
}

/// Packets `stats` dropped for any of `reasons`.
fn dropped(stats: &serde_json::Value, reasons: &[&str]) -> u64 {
    let drops = stats["drops"].as_array().unwrap();
    drops.iter().filter(|d| reasons.iter().any(|r| d[0] == *r)).map(|d| d[1].as_u64().unwrap()).sum()
}

/// Two tenants of weights 1 (blue) and 3 (green) share one expensive NT (synthetic, 40 µs a
/// packet: about 20 kpps of the node's core at its 80% target); each sends 30 kpps of small UDP
/// datagrams from a real iperf3 through kernel VXLAN, so both are over their share and each
/// has a few packets an epoch. What the node delivers splits as weighted DRF says, 1:3.
const WEIGHTED: &str = r#"
apiVersion: snic/v1
kind: Tenant
metadata: {name: blue}
spec: {vnis: [100], weight: 1}
---
apiVersion: snic/v1
kind: Tenant
metadata: {name: green}
spec: {vnis: [200], weight: 3}
---
apiVersion: snic/v1
kind: NT
metadata: {name: slow}
spec: {tenant: blue, shared_with: [green], config: {kind: synthetic, cost_ns: 40000}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: blue-path}
spec: {tenant: blue, nodes: [slow]}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: green-path}
spec: {tenant: green, nodes: [blue/slow]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: blue-all}
spec: {vni: 100, action: {dag: blue-path}}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: green-all}
spec: {vni: 200, action: {dag: green-path}}
"#;

#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn weights_hold_for_real_udp_senders_at_tens_of_kpps() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "iperf3"]);
    let mut t = Topo::four_endpoints_at("w", WEIGHTED, Priority::OwnGroup);
    weighted_senders_get_1_to_3(&mut t, "15360K", &[], 20_000);
}

/// The weights with two dispatcher threads (`data_cores: 2`) and each tenant's flows on both:
/// blue (1) and green (3) each send two iperf3 UDP streams from consecutive ports (the steering
/// rule's hash puts one on each thread), 4 kpps a stream, through the shared NT made slow
/// (100 µs a packet; with `core_target: 0.4` each thread's instance serves about 4 kpps), so
/// both tenants are over their shares on both threads, 2x over the node. The threads hold one
/// fair share between them (the board): what the node delivers splits 1:3.
///
/// Needs 4 cores (scripts/test.sh skips it on fewer, and says so). The NT's cost is real CPU
/// time: on two cores, two dispatchers leave the senders only what their target leaves, and
/// whenever a dispatcher runs past it (a limit moving, a burst) the senders stop for tens of
/// milliseconds, their streams arrive in bursts, and the split follows what arrived (1:1.2 to
/// 1:3.0 there; BENCHMARKS.md "Weights across two dispatcher threads").
#[test]
#[ignore = "needs root (network namespaces) and 4 cores: scripts/test.sh runs it as root with --ignored where there are"]
fn weights_hold_across_two_dispatcher_threads_for_real_senders() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "iperf3"]);
    // (SNIC_TEST_FEW_CORES=1 runs it anyway: how BENCHMARKS.md measured the split on two.)
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(
        cores >= 4 || std::env::var_os("SNIC_TEST_FEW_CORES").is_some(),
        "needs 4 cores (two dispatcher threads, the senders' and the kernel's work); this machine has {cores}"
    );
    let manifest = WEIGHTED.replace("cost_ns: 40000", "cost_ns: 100000");
    assert_ne!(manifest, WEIGHTED);
    let mut t = Topo::new("w2");
    t.priority = Priority::OwnGroup;
    t.add_ns("node");
    for (n, i, vni, inner) in
        [("a", 1, 100, "10.1.0.1/24"), ("b", 2, 100, "10.1.0.2/24"), ("c", 3, 200, "10.1.0.1/24"), ("d", 4, 200, "10.1.0.2/24")]
    {
        t.endpoint(n, i, vni, inner);
    }
    let routes = format!("{}{}{}{}", flood("fa", 100, 1), flood("fb", 100, 2), flood("fc", 200, 3), flood("fd", 200, 4));
    t.start_node_with(&format!("{manifest}{routes}"), Some("data_cores: 2\nfairness: {core_target: 0.4}\n"));
    // 2,048 kbit/s of 64-byte datagrams a stream (4 kpps), two streams a tenant.
    weighted_senders_get_1_to_3(&mut t, "2048K", &["-P", "2", "--cport", "41000"], 8_000);
    // Both threads ran packets through their instance of the NT.
    let v = t.status();
    for k in [0, 1] {
        let nt = v["regions"]["instances"].as_array().unwrap().iter().find(|r| r["thread"] == k && r["chain"][0] == "blue/slow");
        let packets = nt.map_or(0, |r| r["packets"].as_u64().unwrap());
        assert!(packets > 1_000, "thread {k}'s instance of the NT ran {packets} packets: {v}");
    }
}

/// The same over the AF_XDP backend, the endpoints behind a bridge with the node: its one
/// receive ring is drained at every poll into per-tenant queues in the backend (`rx_queues:
/// per_tenant`, the default), so each tenant is held in its own queue and the weights hold.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn weights_hold_for_real_udp_senders_over_af_xdp() {
    if !cfg!(feature = "af_xdp") {
        panic!("needs the AF_XDP backend: run with --features snic/af_xdp (scripts/test.sh does)");
    }
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "iperf3"]);
    let mut t = Topo::new("wx");
    t.priority = Priority::OwnGroup;
    t.add_ns("node");
    let dev = t.bridge_port("node", "192.168.50.1");
    let mut routes = String::new();
    for (n, i, vni, inner) in
        [("a", 1, 100, "10.1.0.1/24"), ("b", 2, 100, "10.1.0.2/24"), ("c", 3, 200, "10.1.0.1/24"), ("d", 4, 200, "10.1.0.2/24")]
    {
        t.bridged_endpoint(n, i, vni, inner);
        routes += &format!(
            "---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: f{n}}}\nspec: {{vni: {vni}, vtep: '192.168.50.{}:4789', flood: true}}\n",
            10 + i
        );
    }
    let config = format!("io: {{af_xdp: {{interface: {dev}}}}}\n");
    t.start_node_with(&format!("{WEIGHTED}{routes}"), Some(&config));
    weighted_senders_get_1_to_3(&mut t, "15360K", &[], 20_000);
    let v = t.status();
    let frames = v["receive"]["messages"].as_u64().unwrap();
    assert!(frames > 20_000, "the senders' packets came through the AF_XDP socket: {frames} frames");
    for n in ["blue", "green"] {
        assert!(dropped(stats(&v, n), &["rx_queue_full"]) > 0, "{n} was held in its own queue: {}", stats(&v, n));
    }
}

/// Blue (weight 1, A → B) and green (weight 3, C → D) each send small UDP datagrams at `rate`
/// (iperf3's `-b`, a stream; `more`: further iperf3 arguments), both over their shares of what
/// they share: what the node delivers splits 1:3 within 15%.
fn weighted_senders_get_1_to_3(t: &mut Topo, rate: &str, more: &[&str], window: u64) {
    t.spawn("b", &["iperf3", "-s", "-p", "5201"]);
    t.spawn("d", &["iperf3", "-s", "-p", "5201"]);
    t.listening("b", &[5201]);
    t.listening("d", &[5201]);
    // 64-byte datagrams (15.36 Mbit/s: 30 kpps), for at most 25 s (killed after 40).
    for n in ["a", "c"] {
        let mut args =
            vec!["timeout", "-s", "KILL", "40", "iperf3", "-c", "10.1.0.2", "-p", "5201", "-u", "-b", rate, "-l", "64", "-t", "25"];
        args.extend(more);
        t.spawn(n, &args);
    }
    // Both are held back at ingress once the node has measured them (limited at admission or
    // left in their own receive queue).
    let held = |v: &serde_json::Value, n: &str| dropped(stats(v, n), &["rate_limit", "rx_queue_full"]);
    let tx = |v: &serde_json::Value, n: &str| stats(v, n)["tx_packets"].as_u64().unwrap();
    let mut first = None;
    wait_for("both tenants are held to their shares", Duration::from_secs(15), || {
        let v = t.status();
        let (b, g) = (held(&v, "blue"), held(&v, "green"));
        let f = *first.get_or_insert((b, g));
        b > f.0 && g > f.1
    });
    // A window of `window` delivered packets, read from one status for both tenants at each end.
    let v0 = t.status();
    let mut v1 = v0.clone();
    wait_for(&format!("{window} packets delivered"), Duration::from_secs(15), || {
        v1 = t.status();
        tx(&v1, "blue") + tx(&v1, "green") >= tx(&v0, "blue") + tx(&v0, "green") + window
    });
    let (blue, green) = (tx(&v1, "blue") - tx(&v0, "blue"), tx(&v1, "green") - tx(&v0, "green"));
    let ratio = green as f64 / blue.max(1) as f64;
    eprintln!(
        "delivered blue {blue}, green {green}: 1:{ratio:.2} (DRF: 1:3); drops blue {}, green {}",
        stats(&v1, "blue")["drops"],
        stats(&v1, "green")["drops"]
    );
    assert!((ratio - 3.0).abs() / 3.0 < 0.15, "blue {blue}, green {green} packets: 1:{ratio:.2}, DRF's is 1:3\n{v1}");
}

/// Issue 49, through the daemon with real senders: three tenants of weights 1, 2 and 5, each
/// with its own 100 µs NT on the dispatcher's core, iperf3 UDP from kernel VXLAN endpoints at 3x
/// and 10x the node's capacity (measured first). The node delivers each its weighted max-min fair
/// share of what reached it (beside CPU hogs the kernel loses part of what the senders send
/// before any socket, tenant-blind; the script reports it) — within 15% at 3x; within 30% at 10x, where on this two-core machine the senders and
/// the kernel's receive path take the node's core from it (BENCHMARKS.md, "Weights, goodput and
/// latency at overload") — and no packet waits long. Ratios and bounds only: no rate is
/// asserted. The node
/// runs at `nice -20`, as docs/operations.md says to run one that shares its machine: beside
/// CPU hogs a node at the default priority loses its core for milliseconds at a time, and its
/// weights drift (docs/fairness.md "Limits"), which this test does not claim.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn weights_hold_for_three_real_senders_at_3x_and_10x_capacity() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "iperf3"]);
    let (rows, stdout) = bench_script("bench-overload.sh", &["3", "3", "10"], &[("NICE", "-20")]);
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, within) in rows.iter().zip([0.15, 0.30]) {
        eprintln!("{row}");
        for t in row["tenants"].as_array().unwrap() {
            let r = t["over_fair_share"].as_f64().unwrap_or(0.0);
            assert!((r - 1.0).abs() <= within, "at {}x, {} got {r:.2} of its fair share: {row}", row["multiple"], t["name"]);
            assert!(t["p99_ms"].as_f64().unwrap() < 250.0, "at {}x, {}'s p99: {row}", row["multiple"], t["name"]);
        }
    }
}

/// A host that reaches the node's data port sends on blue's VNI with B's MAC (issue 15: it
/// used to re-point B's forwarding entry and receive A's traffic for B). Its frames are
/// dropped and counted as `foreign_vtep`; A still reaches B, and the host receives nothing.
const SPOOF: &str = r#"
apiVersion: snic/v1
kind: Tenant
metadata: {name: blue}
spec: {vnis: [100]}
---
apiVersion: snic/v1
kind: NT
metadata: {name: blue-count}
spec: {tenant: blue, config: {kind: counter}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: blue-path}
spec: {tenant: blue, nodes: [blue-count]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: blue-all}
spec: {vni: 100, action: {dag: blue-path}}
"#;

#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn a_host_on_the_data_port_cannot_take_an_endpoints_traffic() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "ping"]);
    let mut t = Topo::new("s");
    t.add_ns("node");
    t.endpoint("a", 1, 100, "10.1.0.1/24");
    t.endpoint("b", 2, 100, "10.1.0.2/24");
    // The attacker: B's inner address and MAC, on blue's VNI, from an address blue never named.
    t.endpoint("e", 5, 100, "10.1.0.2/24");
    let bmac = t.mac("b");
    t.exec("e", &["ip", "link", "set", "vx0", "address", &bmac]);
    t.start_node(&format!("{SPOOF}{}{}", flood("fa", 100, 1), flood("fb", 100, 2)));
    // The node learns A and B.
    let out = t.exec("a", &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains("3 received"), "{out}");
    // The attacker sends 20 echo requests to A with B's MAC as source (it knows A's MAC, so no
    // ARP first); none of them is answered.
    let amac = t.mac("a");
    t.exec("e", &["ip", "neigh", "add", "10.1.0.1", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);
    let before = dropped(stats(&t.status(), "blue"), &["foreign_vtep"]);
    let r = t.exec_status("e", &["ping", "-c", "20", "-i", "0.05", "-W", "1", "10.1.0.1"]);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains(" 0 received"), "the attacker got answers: {out}");
    wait_for("the attacker's frames are dropped as foreign_vtep", Duration::from_secs(10), || {
        dropped(stats(&t.status(), "blue"), &["foreign_vtep"]) >= before + 20
    });
    // B's entry still points at B: A reaches B, and nothing of blue's reaches the attacker.
    let out = t.exec("a", &["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains("5 received"), "A still reaches B: {out}");
    assert_eq!(t.rx_packets("e"), 0, "the attacker received blue's traffic");

    // Now the attacker forges B's VTEP address as its outer source, on its own link, with the
    // node's reverse-path filter off (the kernel would accept it): the node sees the frames come
    // in on the attacker's interface, not on the one it reaches B through, and drops them.
    for conf in ["all", "default", &format!("{}en", t.prefix), &format!("{}an", t.prefix), &format!("{}bn", t.prefix)] {
        t.exec("node", &["sysctl", "-qw", &format!("net.ipv4.conf.{conf}.rp_filter=0")]);
    }
    let edev = format!("{}ee", t.prefix);
    t.exec("e", &["ip", "link", "del", "vx0"]);
    t.exec("e", &["ip", "addr", "add", "192.168.2.2/32", "dev", &edev]);
    t.vxlan("e", &edev, 100, "192.168.5.1", "192.168.2.2", "10.1.0.2/24", "learning");
    t.exec("e", &["ip", "link", "set", "vx0", "address", &bmac]);
    t.exec("e", &["ip", "neigh", "add", "10.1.0.1", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);
    let (before, a_before) = (dropped(stats(&t.status(), "blue"), &["spoofed_vtep"]), t.rx_packets("a"));
    let r = t.exec_status("e", &["ping", "-c", "20", "-i", "0.05", "-W", "1", "10.1.0.1"]);
    assert!(String::from_utf8_lossy(&r.stdout).contains(" 0 received"));
    wait_for("the forged frames are dropped as spoofed_vtep", Duration::from_secs(10), || {
        dropped(stats(&t.status(), "blue"), &["spoofed_vtep"]) >= before + 20
    });
    assert!(t.rx_packets("a") < a_before + 20, "A received the forged echo requests");
    let out = t.exec("a", &["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains("3 received"), "A still reaches B: {out}");
}

/// The pool test's tenants on node A (issue 17): blue (VNI 100, endpoints A and B) through an
/// SNAT of A to 10.1.0.100; green (VNI 200, endpoints C and D, the same inner addresses)
/// through a counter. Endpoints sit behind the router, their VXLAN remote is node A.
const RING: &str = r#"
apiVersion: snic/v1
kind: Tenant
metadata: {name: green}
spec: {vnis: [200]}
---
apiVersion: snic/v1
kind: NT
metadata: {name: green-count}
spec: {tenant: green, config: {kind: counter}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: green-path}
spec: {tenant: green, nodes: [green-count]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: green-all}
spec: {vni: 200, action: {dag: green-path}}
---
apiVersion: snic/v1
kind: Route
metadata: {name: green-c}
spec: {vni: 200, vtep: '10.0.13.2:4789', flood: true}
---
apiVersion: snic/v1
kind: Route
metadata: {name: green-d}
spec: {vni: 200, vtep: '10.0.14.2:4789', flood: true}
---
apiVersion: snic/v1
kind: Tenant
metadata: {name: blue}
spec: {vnis: [100]}
---
apiVersion: snic/v1
kind: NT
metadata: {name: blue-nat}
spec: {tenant: blue, config: {kind: nat, snat: {inside: 10.1.0.1/32, public: 10.1.0.100}}}
---
apiVersion: snic/v1
kind: DAG
metadata: {name: blue-edge}
spec: {tenant: blue, nodes: [blue-nat]}
---
apiVersion: snic/v1
kind: Rule
metadata: {name: blue-all}
spec: {vni: 100, action: {dag: blue-edge}}
---
apiVersion: snic/v1
kind: Route
metadata: {name: blue-a}
spec: {vni: 100, vtep: '10.0.11.2:4789', flood: true}
---
apiVersion: snic/v1
kind: Route
metadata: {name: blue-b}
spec: {vni: 100, vtep: '10.0.12.2:4789', flood: true}
"#;

/// The JSON report an `iperf3 -s -1 -J --logfile LOG` server writes when its test ends (it may
/// end a moment after the client's): waited for, bounded.
fn server_report(log: &std::path::Path) -> String {
    let complete = || std::fs::read_to_string(log).ok().filter(|s| serde_json::from_str::<serde_json::Value>(s).is_ok());
    wait_for("the iperf3 server writes its report", Duration::from_secs(10), || complete().is_some());
    complete().unwrap_or_default()
}

/// Ping replies' timestamps (`ping -D`), in seconds since the epoch.
fn reply_times(ping_output: &str) -> Vec<f64> {
    ping_output.lines().filter(|l| l.contains("bytes from")).filter_map(|l| l.strip_prefix('[')?.split(']').next()?.parse().ok()).collect()
}

fn epoch_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Issue 17's pool on real namespaces: three snic nodes in a ring (`pool.links`), each in its
/// own namespace with a link to a router namespace standing in for the ToR; the endpoints sit
/// behind the router, their kernel VXLAN pointed at node A. A has one region, held by green's
/// traffic, so blue's chain is launched on a peer (B: as near as C, more free regions) and
/// blue's packets are redirected there. Blue's iperf3 TCP runs through B's SNAT; green stops,
/// blue's chain moves back to A with its NAT state during the iperf3 run, and the TCP
/// connection survives (a new SNAT port would reset it at the receiver). Then, with blue on B
/// again, B is killed with SIGKILL: A sees it down, launches blue on C and says so; blue's
/// pings are answered again (how soon is printed, not judged: the test asserts what the pool
/// does, not how fast a loaded machine lets it).
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn a_ring_of_three_nodes_hosts_moves_back_and_survives_a_killed_peer() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "ping", "iperf3"]);
    let mut t = Topo::new("r");
    t.add_ns("tor");
    t.exec("tor", &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    // Nodes A, B, C at 10.0.{1,2,3}.2. The links between nodes carry a redirected datagram,
    // 80 bytes longer than the endpoint's: their MTU is larger (docs/pool.md).
    let nodes = [("nodea", 1, 1), ("nodeb", 2, 4), ("nodec", 3, 2)];
    for (n, i, _) in nodes {
        t.add_ns(n);
        t.veth(n, "tor", &format!("10.0.{i}"), 1600);
        t.exec(n, &["ip", "route", "add", "default", "via", &format!("10.0.{i}.1")]);
    }
    t.routed_endpoints("10.0.1.2");
    std::fs::create_dir_all(&t.state).unwrap();
    let secret = t.state.join("pool.key");
    std::fs::write(&secret, "a pool secret of 32 characters..\n").unwrap();
    let pool = |i: u8| format!("10.0.{i}.2:7946");
    let links = format!("[[{a}, {b}], [{b}, {c}], [{c}, {a}]]", a = pool(1), b = pool(2), c = pool(3));
    let bin = env!("CARGO_BIN_EXE_snic");
    let mut pids = Vec::new();
    for (n, i, regions) in nodes {
        let seeds = if i == 1 { String::new() } else { pool(1) };
        let dir = t.state.join(n);
        let cfg = t.state.join(format!("{n}.yaml"));
        std::fs::write(
            &cfg,
            format!(
                "regions: {regions}\nelastic: {{enabled: true, autoscale: true, monitor_period_ms: 1000}}\npool:\n  listen: {}\n  secret_file: {}\n  seeds: [{seeds}]\n  links: {links}\n",
                pool(i),
                secret.display()
            ),
        )
        .unwrap();
        let (cfg, dir) = (cfg.to_str().unwrap().to_string(), dir.to_str().unwrap().to_string());
        pids.push(t.spawn(n, &[bin, "run", "--config", &cfg, "--data", "0.0.0.0:4789", "--api", "127.0.0.1:7878", "--state-dir", &dir]));
    }
    let status = |t: &Topo, n: &str| -> serde_json::Value {
        let out = t.exec_status(n, &[bin, "status", "-o", "json"]);
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    };
    // A knows both peers' load before blue needs a region.
    wait_for("the pool forms at A", Duration::from_secs(30), || {
        let m = status(&t, "nodea")["pool"]["members"].as_array().cloned().unwrap_or_default();
        m.len() == 2 && m.iter().all(|m| m["free_regions"].as_u64() >= Some(1))
    });
    let green: Vec<&str> = RING.split("\n---\n").filter(|d| d.contains("green")).collect();
    t.apply("nodea", &green.join("\n---\n"));
    // Green's traffic (a ping every 10 ms, bounded) holds A's only region.
    let green_runs = |t: &Topo| {
        let v = status(t, "nodea");
        v["regions"]["instances"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["state"] == "running" && r["chain"][0] == "green/green-count"))
    };
    let green_ping = t.spawn("c", &["ping", "-q", "-i", "0.01", "-w", "120", "10.1.0.2"]);
    wait_for("green runs at A", Duration::from_secs(30), || green_runs(&t));
    t.apply("nodea", RING);
    // The SNAT address lives on blue's overlay: B's endpoint needs to know where it is.
    let amac = t.mac("a");
    t.exec("b", &["ip", "neigh", "add", "10.1.0.100", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);
    let out = t.exec("a", &["ping", "-c", "5", "-i", "0.2", "-W", "5", "10.1.0.2"]);
    assert!(out.contains("5 received"), "blue through a peer: {out}");
    // (Green may be redirected too: its endpoints' neighbour probes after a ping ends are
    // green's traffic.)
    let blue_redirect =
        |v: &serde_json::Value| v["redirects"].as_array().and_then(|r| r.iter().find(|r| r["chain"] == "blue/blue-nat").cloned());
    let peer_of_blue = |t: &Topo| blue_redirect(&status(t, "nodea")).and_then(|r| r["peer"].as_str().map(String::from));
    let blue_hosted = |v: &serde_json::Value| v["hosted"].as_array().and_then(|h| h.iter().find(|h| h["dag"] == "blue/blue-edge").cloned());
    assert_eq!(peer_of_blue(&t).as_deref(), Some("10.0.2.2:4789"), "blue's chain runs on B: {}", status(&t, "nodea")["redirects"]);
    assert!(blue_hosted(&status(&t, "nodeb")).is_some(), "B hosts blue: {}", status(&t, "nodeb")["hosted"]);

    // Blue's TCP through B's SNAT; green stops during it, and blue's chain comes home.
    let log = t.state.join("iperf.json");
    t.spawn("b", &["iperf3", "-s", "-1", "-p", "5201", "-J", "--logfile", log.to_str().unwrap()]);
    t.listening("b", &[5201]);
    let client = Command::new("ip")
        .args(["netns", "exec", &t.ns("a"), "timeout", "-s", "KILL", "60", "iperf3", "-c", "10.1.0.2", "-p", "5201"])
        .args(["-b", "20M", "-t", "20", "-J"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The connection is up once B's hosted DAG counts more than the pings.
    let hosted_packets = |t: &Topo| blue_hosted(&status(t, "nodeb")).and_then(|h| h["packets"].as_u64()).unwrap_or(0);
    wait_for("blue's TCP runs through B", Duration::from_secs(20), || hosted_packets(&t) > 200);
    t.kill(green_ping);
    let events = |v: &serde_json::Value, what: &str| {
        v["elastic"]["events"].as_array().into_iter().flatten().any(|e| e["event"].as_str().is_some_and(|s| s.contains(what)))
    };
    wait_for("blue's chain moves back to A", Duration::from_secs(30), || events(&status(&t, "nodea"), "moved back from peer"));
    let moved = status(&t, "nodea");
    assert!(events(&moved, "with its state"), "{}", moved["elastic"]["events"]);
    let tx_blue = |v: &serde_json::Value| stats(v, "blue")["tx_packets"].as_u64().unwrap();
    let out = client.wait_with_output().unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("iperf3: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert!(v.get("error").is_none() && out.status.success(), "blue's TCP connection survived the move back: {}", v["error"]);
    let at_a = status(&t, "nodea");
    assert!(blue_redirect(&at_a).is_none(), "blue runs at A: {}", at_a["redirects"]);
    assert!(tx_blue(&at_a) > tx_blue(&moved) + 100, "A carried blue's TCP after the move back: {} -> {}", tx_blue(&moved), tx_blue(&at_a));
    let intervals = v["intervals"].as_array().unwrap();
    let last = intervals.last().unwrap()["sum"]["bytes"].as_f64().unwrap();
    assert!(last > 0.0, "blue's TCP still moved bytes at the end: {}", intervals.last().unwrap());
    let server = server_report(&log);
    assert!(server.contains("10.1.0.100"), "the receiver saw the SNAT address: {server}");
    wait_for("B no longer hosts blue", Duration::from_secs(10), || blue_hosted(&status(&t, "nodeb")).is_none());

    // Blue on B again: blue idles until its chain is descheduled at A, green takes the region
    // back, and blue's next packets find no room.
    wait_for("blue's chain is descheduled at A", Duration::from_secs(30), || {
        let v = status(&t, "nodea");
        !v["regions"]["instances"].as_array().is_some_and(|r| r.iter().any(|r| r["state"] == "running" && r["chain"][0] == "blue/blue-nat"))
    });
    t.spawn("c", &["ping", "-q", "-i", "0.01", "-w", "120", "10.1.0.2"]);
    wait_for("green runs at A again", Duration::from_secs(30), || green_runs(&t));
    let out = t.exec("a", &["ping", "-c", "3", "-i", "0.2", "-W", "5", "10.1.0.2"]);
    assert!(out.contains("3 received"), "blue through a peer again: {out}");
    assert_eq!(peer_of_blue(&t).as_deref(), Some("10.0.2.2:4789"), "{}", status(&t, "nodea")["redirects"]);

    // B dies while it hosts blue; blue pings on (every 50 ms, 30 s at most).
    let pinger = Command::new("ip")
        .args(["netns", "exec", &t.ns("a"), "ping", "-D", "-i", "0.05", "-W", "1", "-w", "30", "10.1.0.2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("blue's pings flow", Duration::from_secs(10), || hosted_packets(&t) > 10);
    let killed_at = epoch_s();
    t.kill(pids[1]);
    wait_for("A launches blue on C", Duration::from_secs(30), || peer_of_blue(&t).as_deref() == Some("10.0.3.2:4789"));
    let v = status(&t, "nodea");
    assert!(events(&v, "running it died"), "A says the peer running blue died: {}", v["elastic"]["events"]);
    // (C's status is published every 250 ms: A may see C's answer before C's status shows it.)
    wait_for("C hosts blue", Duration::from_secs(10), || blue_hosted(&status(&t, "nodec")).is_some());
    let out = pinger.wait_with_output().unwrap();
    let times = reply_times(&String::from_utf8_lossy(&out.stdout));
    let before = times.iter().filter(|&&s| s < killed_at).count();
    let again = times.iter().find(|&&s| s > killed_at + 0.2);
    eprintln!("blue's pings: {before} answered before B was killed; answered again {:?} s after", again.map(|s| s - killed_at));
    assert!(before > 0 && again.is_some(), "blue is served again after B died: {}", String::from_utf8_lossy(&out.stdout));
}

/// The routes of the switch-attached test: each endpoint in its VNI's flood list.
fn switch_routes() -> String {
    [("fa", 100, 11), ("fb", 100, 12), ("fc", 200, 13), ("fd", 200, 14)]
        .iter()
        .map(|(name, vni, i)| {
            format!("---\napiVersion: snic/v1\nkind: Route\nmetadata: {{name: {name}}}\nspec: {{vni: {vni}, vtep: '10.0.{i}.2:4789', flood: true}}\n")
        })
        .collect()
}

const SWITCH_NODES: [&str; 3] = ["node1", "node2", "node3"];

/// `snic status -o json` of the node in namespace `n` (null if it does not answer).
fn node_status(t: &Topo, n: &str) -> serde_json::Value {
    let out = t.exec_status(n, &[env!("CARGO_BIN_EXE_snic"), "status", "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// Starts node `k` (0, 1, 2) of the switch-attached pool: its child index.
fn start_switch_node(t: &mut Topo, k: usize) -> usize {
    let n = SWITCH_NODES[k];
    let dir = t.state.join(n);
    let cfg = t.state.join(format!("{n}.yaml")).to_str().unwrap().to_string();
    // (The API on every address: the ToR's health checker asks it.)
    t.spawn(
        n,
        &[
            env!("CARGO_BIN_EXE_snic"),
            "run",
            "--config",
            &cfg,
            "--data",
            "0.0.0.0:4789",
            "--api",
            "0.0.0.0:7878",
            "--state-dir",
            dir.to_str().unwrap(),
        ],
    )
}

/// Issue 18's pool behind a switch: a ToR namespace routes one anycast address (10.0.0.100)
/// to three snic nodes over a resilient next-hop group (64 buckets), hashing flows by their
/// outer UDP ports (which the endpoints' kernel VXLAN derives from the inner flow); etcd, on a
/// ToR address, keeps the pool's one desired state; node k holds state slot k of 3. Four
/// kernel-VXLAN endpoints of two tenants point at the anycast address. `MANIFEST` is applied
/// to node 1 only and deployed on all three. The topology, and the child indexes of etcd and
/// the nodes (`[etcd, node1, node2, node3]`).
fn switch_pool(tag: &str) -> (Topo, Vec<usize>) {
    let mut t = Topo::new(tag);
    t.add_ns("tor");
    t.exec("tor", &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    // Hash on the outer 5-tuple: the VXLAN source port carries the inner flow's hash.
    t.exec("tor", &["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1"]);
    t.exec("tor", &["ip", "addr", "add", "10.0.99.1/32", "dev", "lo"]);
    for (k, n) in SWITCH_NODES.iter().enumerate() {
        let i = k + 1;
        t.add_ns(n);
        // Links to the ToR carry datagrams forwarded between nodes, 80 bytes longer.
        t.veth(n, "tor", &format!("10.0.{i}"), 1600);
        t.exec(n, &["ip", "route", "add", "default", "via", &format!("10.0.{i}.1")]);
        t.exec(n, &["ip", "addr", "add", "10.0.0.100/32", "dev", "lo"]);
        let tor_dev = format!("{}{n}n", t.prefix);
        t.exec("tor", &["ip", "nexthop", "add", "id", &i.to_string(), "via", &format!("10.0.{i}.2"), "dev", &tor_dev]);
    }
    // A bucket idle 2 s may move to a node that comes back (the default, 120 s, is for racks).
    t.exec("tor", &["ip", "nexthop", "add", "id", "10", "group", "1/2/3", "type", "resilient", "buckets", "64", "idle_timer", "2"]);
    t.exec("tor", &["ip", "route", "add", "10.0.0.100/32", "nhid", "10"]);
    t.routed_endpoints("10.0.0.100");
    std::fs::create_dir_all(&t.state).unwrap();
    // etcd on the ToR's address (its peer URL on the ToR's loopback).
    let etcd_dir = t.state.join("etcd");
    let url = "http://10.0.99.1:2379";
    let peer = "http://127.0.0.1:2380";
    let etcd = t.spawn(
        "tor",
        &[
            "etcd",
            "--data-dir",
            etcd_dir.to_str().unwrap(),
            "--name",
            "snic-test",
            "--listen-client-urls",
            url,
            "--advertise-client-urls",
            url,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            &format!("snic-test={peer}"),
        ],
    );
    wait_for("etcd is healthy", Duration::from_secs(30), || {
        let get = "exec 3<>/dev/tcp/10.0.99.1/2379 && printf 'GET /health HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3";
        String::from_utf8_lossy(&t.exec_status("tor", &["bash", "-c", get]).stdout).contains("true")
    });
    let secret = t.state.join("pool.key");
    std::fs::write(&secret, "a pool secret of 32 characters..\n").unwrap();
    // The API on every address (the ToR's health checker asks it) needs credentials.
    let token = t.state.join("operator.token");
    std::fs::write(&token, OPERATOR_TOKEN).unwrap();
    let mut pids = vec![etcd];
    for (k, n) in SWITCH_NODES.iter().enumerate() {
        let i = k + 1;
        let seeds = if i == 1 { String::new() } else { "10.0.1.2:7946".into() };
        let cfg = t.state.join(format!("{n}.yaml"));
        std::fs::write(
            &cfg,
            format!(
                "pool:\n  listen: 10.0.{i}.2:7946\n  secret_file: {}\n  seeds: [{seeds}]\n  etcd: [{url}]\n  slots: 3\n  slot: {k}\nauth:\n  operator_token_file: {}\n",
                secret.display(),
                token.display()
            ),
        )
        .unwrap();
        pids.push(start_switch_node(&mut t, k));
    }
    // Every node knows who holds the other two slots.
    for n in SWITCH_NODES {
        wait_for(&format!("{n} knows the other nodes' slots"), Duration::from_secs(30), || {
            node_status(&t, n)["owners"]["holders"].as_array().is_some_and(|h| h.len() == 2)
        });
    }
    t.apply("node1", &format!("{MANIFEST}{}", switch_routes()));
    for n in &SWITCH_NODES[1..] {
        wait_for(&format!("{n} deploys what was applied to node1"), Duration::from_secs(30), || {
            node_status(&t, n)["tenants"].as_array().is_some_and(|ts| ts.len() == 2)
        });
    }
    (t, pids)
}

/// Issue 18's pool behind a switch, traffic: the manifest is applied to node 1 only; green's
/// TCP (16 connections) is spread over the nodes, and every node carries some of it through the
/// applied chain. Blue's 8 TCP connections run through SNAT: each node allocates from its own
/// block of ports (`pool.slot`), and the return traffic, which the ToR hashes independently,
/// is forwarded to the node holding the mapping — every connection completes and the server
/// sees the translated source.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn a_pool_behind_a_switch_shares_one_state_and_brings_snat_replies_to_their_owner() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "iperf3", "etcd", "bash"]);
    let (mut t, pids) = switch_pool("s");
    let nodes = SWITCH_NODES;
    let status = node_status;
    // Green: 16 TCP connections, spread over the nodes by the ToR.
    t.spawn("d", &["iperf3", "-s", "-1", "-p", "5201"]);
    t.listening("d", &[5201]);
    let out =
        t.exec("c", &["timeout", "-s", "KILL", "60", "iperf3", "-c", "10.1.0.2", "-p", "5201", "-P", "16", "-t", "3", "-b", "2M", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3: {e}: {out}"));
    assert!(v.get("error").is_none(), "green's TCP through the pool: {}", v["error"]);
    for n in nodes {
        let s = status(&t, n);
        let green = stats(&s, "green");
        assert!(green["tx_packets"].as_u64().unwrap() > 0, "{n} carried some of green's flows through the chain applied at node1: {green}");
    }

    // Blue: 8 TCP connections through SNAT; their replies come back by other hashes.
    let amac = t.mac("a");
    t.exec("b", &["ip", "neigh", "add", "10.1.0.100", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);
    let log = t.state.join("iperf-blue.json");
    t.spawn("b", &["iperf3", "-s", "-1", "-p", "5201", "-J", "--logfile", log.to_str().unwrap()]);
    t.listening("b", &[5201]);
    let out =
        t.exec("a", &["timeout", "-s", "KILL", "60", "iperf3", "-c", "10.1.0.2", "-p", "5201", "-P", "8", "-t", "4", "-b", "2M", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3: {e}: {out}"));
    assert!(v.get("error").is_none(), "blue's TCP through the pool's SNAT: {}", v["error"]);
    let streams = v["end"]["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 8, "{}", v["end"]);
    for s in streams {
        assert!(s["receiver"]["bytes"].as_u64().unwrap() > 0, "every connection carried data: {s}");
    }
    let server = server_report(&log);
    assert!(server.contains("10.1.0.100"), "the receiver saw the SNAT address: {server}");
    let sum = |what: &str| nodes.iter().map(|n| status(&t, n)["owners"][what].as_u64().unwrap_or(0)).sum::<u64>();
    let (forwarded, received) = (sum("forwarded"), sum("received"));
    eprintln!("packets forwarded to their state's owner: {forwarded}, received as owner: {received}");
    assert!(forwarded > 0 && received > 0, "replies that landed elsewhere went to their owner: {forwarded} {received}");

    // etcd stops: an apply on any node fails clearly, nothing changes, traffic runs on.
    t.kill(pids[0]);
    let mf = t.state.join("late.yaml");
    std::fs::write(&mf, "apiVersion: snic/v1\nkind: Tenant\nmetadata: {name: late}\nspec: {vnis: [300]}\n").unwrap();
    let out = t.exec_status("node2", &[env!("CARGO_BIN_EXE_snic"), "apply", "-f", mf.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("state_store_unavailable"), "an apply without etcd: {err}");
    let out = t.exec("c", &["ping", "-c", "5", "-i", "0.2", "-W", "2", "10.1.0.2"]);
    assert!(out.contains(" 0% packet loss"), "green runs on without etcd: {out}");
    for n in nodes {
        assert_eq!(status(&t, n)["tenants"].as_array().map(Vec::len), Some(2), "{n} still runs what it had");
    }
}

/// The established TCP connections in namespace `n`: (local port, peer port).
fn established(t: &Topo, n: &str) -> Vec<(u16, u16)> {
    let port = |a: &str| a.rsplit(':').next().and_then(|p| p.parse().ok());
    let out = t.exec(n, &["ss", "-Htn", "state", "established"]);
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((port(f.get(2)?)?, port(f.get(3)?)?))
        })
        .collect()
}

/// Blue's SNAT address made known at b, and `n` iperf3 servers there: their ports (from 5211:
/// not 5202, which blue's firewall denies, nor 5210, kept for new connections).
fn blue_servers(t: &mut Topo, n: u16) -> Vec<u16> {
    let amac = t.mac("a");
    t.exec("b", &["ip", "neigh", "add", "10.1.0.100", "lladdr", &amac, "dev", "vx0", "nud", "permanent"]);
    let ports: Vec<u16> = (5211..5211 + n).collect();
    for p in &ports {
        t.spawn("b", &["iperf3", "-s", "-1", "-p", &p.to_string()]);
    }
    t.listening("b", &ports);
    ports
}

/// One iperf3 client from a per port (10 s, 1 Mbit/s), output piped.
fn blue_clients(t: &Topo, ports: &[u16]) -> Vec<(u16, Child)> {
    ports
        .iter()
        .map(|&p| {
            let c = Command::new("ip")
                .args(["netns", "exec", &t.ns("a"), "timeout", "-s", "KILL", "60", "iperf3", "-c", "10.1.0.2", "-p", &p.to_string()])
                .args(["-t", "10", "-b", "1M", "-J"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            (p, c)
        })
        .collect()
}

/// Blue packets the three nodes of the switch-attached pool have delivered (a node that does
/// not answer counts 0).
fn blue_delivered(t: &Topo) -> u64 {
    SWITCH_NODES
        .iter()
        .filter_map(|n| {
            let v = node_status(t, n);
            v["tenants"].as_array()?.iter().find(|t| t["name"] == "blue")?["stats"]["tx_packets"].as_u64()
        })
        .sum()
}

/// `snic tor` on the ToR, keeping group 10 to the healthy of the three nodes.
fn start_tor_checker(t: &mut Topo) {
    let members: Vec<String> = (1..=3).map(|i| format!("{i}=http://10.0.{i}.2:7878")).collect();
    let mut tor = vec![env!("CARGO_BIN_EXE_snic"), "tor", "--group", "10"];
    for m in &members {
        tor.extend(["--member", m.as_str()]);
    }
    t.spawn("tor", &tor);
}

/// Eight new blue connections (1 s) to a new server on b: they succeed.
fn new_blue_connections(t: &mut Topo, when: &str) {
    t.spawn("b", &["iperf3", "-s", "-1", "-p", "5210"]);
    t.listening("b", &[5210]);
    let out =
        t.exec("a", &["timeout", "-s", "KILL", "30", "iperf3", "-c", "10.1.0.2", "-p", "5210", "-P", "8", "-t", "1", "-b", "1M", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3: {e}: {out}"));
    assert!(v.get("error").is_none(), "new connections {when}: {}", v["error"]);
}

/// Issue 18, node failure and return, on the switch-attached pool: `snic tor` keeps the ToR's
/// group to the healthy nodes. Twelve blue TCP clients run through SNAT; node 2 is killed
/// with SIGKILL mid-run. The ToR takes it out of its group (only its buckets move), new
/// connections succeed over nodes 1 and 3 (how soon is printed, not judged), and every
/// connection whose state nodes 1 and 3 held — by its SNAT port's block — runs to its end
/// without a break. Node 2, restarted, loads the desired state from etcd, is taken back into
/// the group and carries green's traffic again, with no re-apply.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn a_pool_behind_a_switch_loses_only_a_killed_nodes_flows_and_takes_it_back() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "iperf3", "etcd", "bash"]);
    let (mut t, pids) = switch_pool("f");
    start_tor_checker(&mut t);
    let group = |t: &Topo| t.exec("tor", &["ip", "nexthop", "show", "id", "10"]);

    // Blue: twelve TCP clients through SNAT, each with its own server. A client's state is on
    // node 2 when either of its two connections got a port of node 2's block (5 in 9 by the
    // ToR's hash): with twelve, all of them land there about once in 1,200 runs, not once in
    // 35 as with six, and the survivors' check below has something to check.
    let ports = blue_servers(&mut t, 12);
    let clients = blue_clients(&t, &ports);
    // Each client's control and data connections, by the SNAT port the server sees.
    let blue = |t: &Topo| -> Vec<(u16, u16)> { established(t, "b").into_iter().filter(|(l, _)| ports.contains(l)).collect() };
    wait_for("the twelve clients are connected", Duration::from_secs(20), || blue(&t).len() == 24);
    let range = snic_core::mat::PortRange { lo: 1024, hi: 65535 };
    let touched: std::collections::BTreeSet<u16> =
        blue(&t).into_iter().filter(|&(_, p)| snic_core::pool::owner::slot_of(range, 3, p) == 1).map(|(l, _)| l).collect();
    // Each connection carries data before the kill.
    let before = blue_delivered(&t);
    wait_for("the connections carry data", Duration::from_secs(20), || blue_delivered(&t) >= before + 200);

    let killed_at = Instant::now();
    t.kill(pids[2]);
    wait_for("the ToR takes node 2 out of its group", Duration::from_secs(30), || group(&t).contains("group 1/3 "));
    let out_after = killed_at.elapsed();
    new_blue_connections(&mut t, "over nodes 1 and 3");
    eprintln!("node 2 killed: out of the ToR's group {out_after:?} after; 8 new connections done {:?} after", killed_at.elapsed());
    for (p, c) in clients {
        let out = c.wait_with_output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let ok = out.status.success() && v.is_object() && v.get("error").is_none();
        if touched.contains(&p) {
            eprintln!("connection to :{p} had state on node 2: {}", if ok { "ran to its end" } else { "broke" });
        } else {
            assert!(ok, "connection to :{p}, held by nodes 1 and 3, ran to its end: {} {}", out.status, v["error"]);
        }
    }
    assert!(touched.len() < ports.len(), "some connections had their state on nodes 1 and 3 (ports {touched:?} on node 2)");

    // Node 2 comes back: the desired state from etcd, back in the group, given buckets.
    start_switch_node(&mut t, 1);
    wait_for("the ToR takes node 2 back", Duration::from_secs(30), || group(&t).contains("group 1/2/3 "));
    wait_for("node 2 is given buckets again", Duration::from_secs(30), || {
        t.exec("tor", &["ip", "nexthop", "bucket", "show", "id", "10"]).lines().any(|l| l.trim_end().ends_with("nhid 2"))
    });
    t.spawn("d", &["iperf3", "-s", "-1", "-p", "5201"]);
    t.listening("d", &[5201]);
    let out =
        t.exec("c", &["timeout", "-s", "KILL", "30", "iperf3", "-c", "10.1.0.2", "-p", "5201", "-P", "16", "-t", "2", "-b", "1M", "-J"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("iperf3: {e}: {out}"));
    assert!(v.get("error").is_none(), "green over the three nodes: {}", v["error"]);
    let s2 = node_status(&t, "node2");
    assert!(stats(&s2, "green")["tx_packets"].as_u64().unwrap() > 0, "node 2, restarted, serves green with no re-apply: {}", s2["tenants"]);
}

/// Issue 18, draining: six blue TCP connections through SNAT start nearly all on node 2 (the
/// ToR's group gives node 2 62 of its 64 buckets while they connect, then a third; a
/// resilient group leaves active flows where they are). Node 2 is drained (`snic drain`): its health check fails,
/// `snic tor` withdraws it, its flows' packets now land on nodes 1 and 3, which bring them back
/// to node 2 (it named them), and every connection runs to its end; new connections go to
/// nodes 1 and 3. Once its flows have ended, `snic drain` says node 2 is drained, and it stops.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn a_drained_node_leaves_the_pool_behind_a_switch_with_no_flow_lost() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "iperf3", "etcd", "bash"]);
    let (mut t, pids) = switch_pool("d");
    let bin = env!("CARGO_BIN_EXE_snic");
    let set_group = |t: &Topo, g: &str| t.exec("tor", &["ip", "nexthop", "replace", "id", "10", "group", g, "type", "resilient"]);
    let group = |t: &Topo| t.exec("tor", &["ip", "nexthop", "show", "id", "10"]);
    let ports = blue_servers(&mut t, 6);
    // Nearly every bucket to node 2 while they connect (a group of one next hop would not
    // track its buckets' use, and giving the others back would move active flows).
    set_group(&t, "1,1/2,62/3,1");
    let clients = blue_clients(&t, &ports);
    let blue = |t: &Topo| -> Vec<(u16, u16)> { established(t, "b").into_iter().filter(|(l, _)| ports.contains(l)).collect() };
    wait_for("the six clients are connected", Duration::from_secs(20), || blue(&t).len() == 12);
    let range = snic_core::mat::PortRange { lo: 1024, hi: 65535 };
    let on_node2 = blue(&t).into_iter().filter(|&(_, p)| snic_core::pool::owner::slot_of(range, 3, p) == 1).count();
    assert!(on_node2 > 0, "some connections' state is on node 2");
    set_group(&t, "1/2/3");
    start_tor_checker(&mut t);
    let before = blue_delivered(&t);
    wait_for("the connections carry data", Duration::from_secs(20), || blue_delivered(&t) >= before + 200);

    let out = t.exec("node2", &[bin, "drain", "--no-wait"]);
    assert!(out.contains("draining"), "{out}");
    wait_for("the ToR withdraws node 2", Duration::from_secs(30), || group(&t).contains("group 1/3 "));
    let pinned =
        |t: &Topo| [0usize, 2].iter().map(|&k| node_status(t, SWITCH_NODES[k])["owners"]["pinned"].as_u64().unwrap_or(0)).sum::<u64>();
    wait_for("nodes 1 and 3 know node 2's flows", Duration::from_secs(10), || pinned(&t) > 0);
    new_blue_connections(&mut t, "while node 2 drains");
    for (p, c) in clients {
        let out = c.wait_with_output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        assert!(
            out.status.success() && v.is_object() && v.get("error").is_none(),
            "connection to :{p}, held by the draining node 2, ran to its end: {} {}",
            out.status,
            v["error"]
        );
    }
    let forwarded = [0usize, 2].iter().map(|&k| node_status(&t, SWITCH_NODES[k])["owners"]["forwarded"].as_u64().unwrap_or(0)).sum::<u64>();
    assert!(forwarded > 0, "nodes 1 and 3 brought node 2's packets back to it");
    let out = t.exec("node2", &[bin, "drain", "--timeout-s", "60"]);
    assert!(out.contains("drained"), "node 2's flows ended: {out}");
    t.kill(pids[2]);
    eprintln!("drained node 2: {on_node2} of 12 connections held there; {forwarded} packets brought back to it by nodes 1 and 3");
}

/// A UDP socket bound in namespace `n`: made on a thread that entered the namespace (the socket
/// stays in it wherever it is used).
fn udp_socket_in(t: &Topo, n: &str) -> std::net::UdpSocket {
    let path = format!("/var/run/netns/{}", t.ns(n));
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on this thread only, with a namespace file descriptor we hold open.
        assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns {path}");
        std::net::UdpSocket::bind("0.0.0.0:0").unwrap()
    })
    .join()
    .unwrap()
}

/// Starts memcached in namespace `n`, UDP on `ip`:11211 (TCP off), and waits until it listens;
/// its index among the children.
fn start_memcached(t: &mut Topo, n: &str, ip: &str) -> usize {
    let i = t.spawn(n, &["memcached", "-U", "11211", "-p", "0", "-l", ip, "-u", "root", "-m", "64"]);
    wait_for(&format!("memcached listens on {n}"), Duration::from_secs(10), || {
        let out = t.exec_status(n, &["ss", "-Hlun", "sport = :11211"]);
        out.status.success() && !out.stdout.is_empty()
    });
    i
}

/// Tenant blue's only NT is a cache in front of its memcached server on B (the example's
/// manifest); green (VNI 200, endpoints C and D) has no NT.
const KV_CACHE: &str = concat!(
    include_str!("../../../examples/kv.yaml"),
    "---\napiVersion: snic/v1\nkind: Tenant\nmetadata: {name: green}\nspec: {vnis: [200]}\n"
);

/// Real memcached (UDP) on B behind a `kv_cache` NT, clients on A: reads the NT answers never
/// reach the server (its own `stats`), a write is read back at once, answers spanning several
/// datagrams and writes spanning several IP fragments get through, and clients reading while
/// others write never read a value older than one already acknowledged.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn a_cache_nt_answers_for_real_memcached_and_never_serves_an_acknowledged_value_stale() {
    use snic_perf::kv::Client;
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "memcached", "memcaslap"]);
    let mut t = Topo::four_endpoints("", KV_CACHE);
    start_memcached(&mut t, "b", "10.1.0.2");
    let server: std::net::SocketAddr = "10.1.0.2:11211".parse().unwrap();
    let mut client = Client::new(udp_socket_in(&t, "a"), server);
    // The server's own view, from its namespace (not through snic).
    let mut direct = Client::new(udp_socket_in(&t, "b"), server);
    let gets = |direct: &mut Client| -> u64 { direct.stats().unwrap()["cmd_get"].parse().unwrap() };

    // Write-through: a value set through the NT is read back, and the reads never reach the
    // server.
    assert_eq!(client.set(b"k1", 7, b"hello").unwrap(), "STORED");
    let before = gets(&mut direct);
    for _ in 0..5 {
        assert_eq!(client.get(b"k1").unwrap(), Some((7, b"hello".to_vec())));
    }
    assert_eq!(gets(&mut direct), before, "reads of a value written through the cache reached the server");

    // Read-through: a value the server has and the cache does not is read there once, then here.
    assert_eq!(direct.set(b"k2", 0, b"from the server").unwrap(), "STORED");
    let before = gets(&mut direct);
    assert_eq!(client.get(b"k2").unwrap(), Some((0, b"from the server".to_vec())));
    assert_eq!(client.get(b"k2").unwrap(), Some((0, b"from the server".to_vec())));
    assert_eq!(gets(&mut direct), before + 1, "the second read reached the server");

    // A write through the NT replaces the cached value at once.
    assert_eq!(client.set(b"k1", 8, b"bye").unwrap(), "STORED");
    assert_eq!(client.get(b"k1").unwrap(), Some((8, b"bye".to_vec())));

    // Large: a 4 KB write travels as IP fragments, its answer and a 3-key read's answer as
    // several memcached datagrams.
    let big: Vec<u8> = (0..4000u32).map(|i| b'a' + (i % 26) as u8).collect();
    assert_eq!(client.set(b"big", 1, &big).unwrap(), "STORED");
    assert_eq!(client.get(b"big").unwrap(), Some((1, big.clone())));
    for k in [&b"m1"[..], b"m2", b"m3"] {
        assert_eq!(client.set(k, 0, &[k[1]; 1000]).unwrap(), "STORED");
    }
    let text = client.call(b"get m1 m2 m3\r\n", Duration::from_secs(1)).unwrap();
    let mut got = vec![];
    snic_nt::kv::proto::values(&text, |v| got.push((v.key.to_vec(), v.data.len()))).unwrap();
    assert_eq!(got, [(b"m1".to_vec(), 1000), (b"m2".to_vec(), 1000), (b"m3".to_vec(), 1000)]);
    // Both were read back together by the NT and cached (the big one from three datagrams, the
    // three keys from memcached's one message per key): the same reads again do not reach the
    // server, and come back whole in several datagrams from the node.
    let before = gets(&mut direct);
    assert_eq!(client.get(b"big").unwrap(), Some((1, big.clone())));
    assert_eq!(client.call(b"get m1 m2 m3\r\n", Duration::from_secs(1)).unwrap(), text);
    assert_eq!(gets(&mut direct), before, "long answers were not served from the cache");
    // (The status is published every 250 ms.)
    wait_for("hits counted in status", Duration::from_secs(5), || nt_counter(&t.status(), "blue/blue-cache", "hits") >= 7);
    // A fragmented write replaces a cached value too.
    assert_eq!(client.set(b"k1", 0, &big).unwrap(), "STORED");
    assert_eq!(client.get(b"k1").unwrap(), Some((0, big.clone())));
    // The server's errors come back.
    assert_eq!(client.call(b"bogus\r\n", Duration::from_secs(1)).unwrap(), b"ERROR\r\n");

    // Two writers (each owning four keys, writing versions 1, 2, … of each) and two readers, all
    // on A. Whenever a reader's read starts after a version was acknowledged, it must return
    // that version or a later one.
    type Acked = std::sync::Mutex<std::collections::HashMap<String, Vec<(u32, Instant)>>>;
    let acked: std::sync::Arc<Acked> = Default::default();
    let version = |v: &[u8]| -> u32 { std::str::from_utf8(v).unwrap().split(':').next().unwrap().parse().unwrap() };
    let mut handles = vec![];
    for w in 0..2 {
        let (mut c, acked) = (Client::new(udp_socket_in(&t, "a"), server), acked.clone());
        handles.push(std::thread::spawn(move || {
            for n in 1..=60u32 {
                for k in 0..4 {
                    let key = format!("c{w}{k}");
                    let v = format!("{n}:{}", "x".repeat((n as usize * 37) % 300));
                    assert_eq!(c.set(key.as_bytes(), 0, v.as_bytes()).unwrap(), "STORED");
                    acked.lock().unwrap().entry(key).or_default().push((n, Instant::now()));
                }
            }
        }));
    }
    let mut reads = vec![];
    for r in 0..2 {
        let mut c = Client::new(udp_socket_in(&t, "a"), server);
        reads.push(std::thread::spawn(move || {
            let mut seen = vec![];
            for i in 0..400 {
                let key = format!("c{}{}", (i + r) % 2, (i / 2) % 4);
                let start = Instant::now();
                if let Some((_, v)) = c.get(key.as_bytes()).unwrap() {
                    seen.push((key, start, v));
                }
            }
            seen
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let acked = acked.lock().unwrap();
    let mut checked = 0;
    for h in reads {
        for (key, start, v) in h.join().unwrap() {
            let got = version(&v);
            let newest_acked = acked[&key].iter().filter(|(_, at)| *at < start).map(|(n, _)| *n).max().unwrap_or(0);
            assert!(got >= newest_acked, "{key}: read version {got} after version {newest_acked} was acknowledged");
            checked += 1;
        }
    }
    assert!(checked > 0, "the readers read nothing");
    eprintln!("{checked} concurrent reads checked");

    // A real client, Debian's memcaslap over UDP, verifying half the values it reads: none
    // wrong, and some answered by the node. (Counts from snapshots published after the readers
    // above and memcaslap finished.)
    let cache = |s: &serde_json::Value| ["hits", "misses", "fills", "invalidations"].map(|n| (n, nt_counter(s, "blue/blue-cache", n)));
    let before = cache(&t.status_since(Instant::now()));
    let out = t.exec(
        "a",
        &["timeout", "-s", "KILL", "60", "memcaslap", "-s", "10.1.0.2:11211", "--udp", "-t", "3s", "-c", "8", "-T", "1", "--verify=0.5"],
    );
    let stat = |name: &str| -> u64 {
        let line =
            out.lines().find(|l| l.starts_with(&format!("{name}:"))).unwrap_or_else(|| panic!("no {name} in memcaslap's report: {out}"));
        line[name.len() + 1..].trim().parse().unwrap()
    };
    assert!(stat("cmd_get") > 0, "{out}");
    assert_eq!(stat("verify_failed"), 0, "memcaslap read a wrong value through the cache: {out}");
    let after = cache(&t.status_since(Instant::now()));
    assert!(after[0].1 > before[0].1, "none of memcaslap's reads answered by the node: cache {before:?} → {after:?}; {out}");
}

/// Tenant blue's writes to its memcached server on B are made on B, E and F too (the example's
/// manifest).
const KV_REPLICATE: &str = include_str!("../../../examples/kv-replicate.yaml");

/// Real memcached (UDP) on B, E and F behind a `kv_replicate` NT, a client on A: a write is
/// acknowledged once all three stored it, and each server holds it (read from its own
/// namespace); reads go to the three in turn; with one server stopped, a write is never
/// acknowledged: the client gets memcached's `SERVER_ERROR`.
#[test]
#[ignore = "needs root (network namespaces): scripts/test.sh runs it as root with --ignored"]
fn a_replication_nt_acknowledges_a_write_only_once_every_real_memcached_stored_it() {
    use snic_perf::kv::Client;
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_root_and(&["ip", "ss", "ethtool", "memcached"]);
    let mut t = Topo::new("");
    t.add_ns("node");
    let servers = [("b", 2, "10.1.0.2"), ("e", 5, "10.1.0.3"), ("f", 6, "10.1.0.4")];
    t.endpoint("a", 1, 100, "10.1.0.1/24");
    for (n, i, ip) in servers {
        t.endpoint(n, i, 100, &format!("{ip}/24"));
    }
    let floods: String = [1u8, 2, 5, 6].iter().map(|&i| flood(&format!("f{i}"), 100, i)).collect();
    t.start_node(&format!("{KV_REPLICATE}{floods}"));
    let mut daemons = vec![];
    for (n, _, ip) in servers {
        daemons.push(start_memcached(&mut t, n, ip));
    }
    let mut client = Client::new(udp_socket_in(&t, "a"), "10.1.0.2:11211".parse().unwrap());
    let mut direct: Vec<Client> =
        servers.iter().map(|(n, _, ip)| Client::new(udp_socket_in(&t, n), format!("{ip}:11211").parse().unwrap())).collect();

    assert_eq!(client.set(b"k", 3, b"replicated").unwrap(), "STORED");
    for (d, (n, _, _)) in direct.iter_mut().zip(servers) {
        assert_eq!(d.get(b"k").unwrap(), Some((3, b"replicated".to_vec())), "the value on {n}");
    }
    // Reads in turn: each server answers one, in B's name (the client's socket would not
    // take an answer from elsewhere as this request's: `call` matches the request id only).
    let before: Vec<u64> = direct.iter_mut().map(|d| d.stats().unwrap()["cmd_get"].parse().unwrap()).collect();
    for i in 0..3 {
        assert_eq!(client.get(b"k").unwrap(), Some((3, b"replicated".to_vec())), "read {i}");
    }
    let after: Vec<u64> = direct.iter_mut().map(|d| d.stats().unwrap()["cmd_get"].parse().unwrap()).collect();
    let served: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(served, [1, 1, 1], "reads per server");
    // A write too large for one IP packet (fragmented by the client's kernel) is made on all
    // three too.
    let big: Vec<u8> = (0..4000u32).map(|i| b'a' + (i % 26) as u8).collect();
    assert_eq!(client.set(b"big", 0, &big).unwrap(), "STORED");
    for (d, (n, _, _)) in direct.iter_mut().zip(servers) {
        assert_eq!(d.get(b"big").unwrap(), Some((0, big.clone())), "the 4 KB value on {n}");
    }
    // A delete is replicated too.
    assert_eq!(client.call(b"delete k\r\n", Duration::from_secs(1)).unwrap(), b"DELETED\r\n");
    for d in direct.iter_mut() {
        assert_eq!(d.get(b"k").unwrap(), None);
    }

    // F stops: a write cannot be made on all three, and is not acknowledged.
    t.kill(daemons[2]);
    let answer = client.set(b"k2", 0, b"v").unwrap();
    assert_eq!(answer, "SERVER_ERROR replica timeout", "a write acknowledged without all replicas");
    let held = dropped(stats(&t.status(), "blue"), &["kv_answer_held"]);
    assert!(held >= 4, "the replicas' answers held before the last: {held}");
    // (The status is published every 250 ms.)
    wait_for("the timeout counted in status", Duration::from_secs(5), || nt_counter(&t.status(), "blue/blue-replicate", "timeouts") >= 1);
}

/// NT `nt`'s own counter `name`, summed over the regions in `status`.
fn nt_counter(status: &serde_json::Value, nt: &str, name: &str) -> u64 {
    let regions = status["regions"]["instances"].as_array().unwrap_or_else(|| panic!("no regions: {status}"));
    regions
        .iter()
        .flat_map(|r| r["counters"].as_array().unwrap().iter())
        .filter(|c| c[0] == nt && c[1] == name)
        .map(|c| c[2].as_u64().unwrap())
        .sum()
}
