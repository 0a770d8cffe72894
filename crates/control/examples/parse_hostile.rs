//! Times `manifest::parse` on hostile request bodies (deep flow and block nesting, an alias
//! bomb) and on a large valid one, as the API receives them: the figures of BENCHMARKS.md,
//! "Hostile manifests".
//!
//! ```sh
//! cargo run --release -p snic-control --example parse_hostile [MAX_KB [RUNS]]
//! ```
//!
//! Bodies up to `MAX_KB` (default 1000) kB, best of `RUNS` (default 3). The parser before
//! issue 15 (libyaml) takes minutes on the largest: give it `200 1`.

use std::time::Instant;

fn time(name: &str, body: &str, runs: usize) {
    // The best of `runs`, so one scheduling hiccup does not make the figure.
    let mut best = f64::MAX;
    let mut outcome = String::new();
    for _ in 0..runs {
        let t = Instant::now();
        let r = snic_control::manifest::parse(body);
        best = best.min(t.elapsed().as_secs_f64());
        outcome = match r {
            Ok(o) => format!("{} objects", o.len()),
            Err(e) => format!("refused: {}", e.reason.chars().take(48).collect::<String>()),
        };
    }
    println!("{name:<28} {:>8} KB {:>10.3} ms  {outcome}", body.len() / 1000, best * 1e3);
}

fn main() {
    let arg = |i: usize, d: usize| std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (max_kb, runs) = (arg(1, 1000), arg(2, 3));
    for kb in [50, 200, 1000].into_iter().filter(|&k| k <= max_kb) {
        let n = kb * 1000;
        time(&format!("flow `{{a: [` x{}", n / 5), &"{a: [".repeat(n / 5), runs);
        time(&format!("json `{{\"a\":` x{}", n / 5), &"{\"a\":".repeat(n / 5), runs);
        time(&format!("flow `[` x{n}"), &"[".repeat(n), runs);
        time(&format!("block `- ` x{}", n / 2), &"- ".repeat(n / 2), runs);
    }
    let mut bomb = String::from("a: &a [x,x,x,x,x,x,x,x,x,x]\n");
    for (p, q) in ["a", "b", "c", "d", "e", "f", "g"].windows(2).map(|w| (w[0], w[1])) {
        bomb += &format!("{q}: &{q} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n");
    }
    time("alias bomb (10^7 nodes)", &bomb, runs);
    // A valid manifest near the body limit: one firewall NT with 5,000 rules.
    let mut fw = String::from(
        "apiVersion: snic/v1\nkind: NT\nmetadata: {name: fw}\nspec:\n  tenant: t\n  config:\n    kind: firewall\n    rules:\n",
    );
    for i in 0..5000 {
        fw += &format!("      - {{src: '10.{}.{}.0/24', dst_ports: {{lo: 80, hi: 90}}, action: deny}}\n", i / 256, i % 256);
    }
    time("valid: 5,000 firewall rules", &fw, runs);
}
