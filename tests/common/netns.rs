//! A host of its own for one node, cut off from the database on demand (`tests/partition.rs`):
//! a network namespace joined to this one by two veth pairs, one that carries only the
//! database's traffic and one for everything else (the test's requests, the node's webhooks).
//! [`Host::cut`] takes the database link down on this side, as when a cable is pulled or a
//! switch port dies: the node's packets to the database vanish without an answer, its TCP
//! connections stay open until a timeout ends them, and the node keeps answering its clients.
//!
//! Made with `ip netns` and `ip link` from Debian's iproute2; it needs root (CAP_NET_ADMIN),
//! as CI runs. Everything it makes is named after this process and removed on drop; a
//! process killed before that leaves a namespace and two links named after its pid, which
//! the next run removes.

use std::net::Ipv4Addr;
use std::process::Command;

/// The namespace and the database link's and the client link's names carry this and the
/// test process's pid.
const PREFIX: &str = "ikpart";

pub struct Host {
    /// The namespace's name.
    name: String,
    /// This side's end of the database link (the one [`Host::cut`] takes down).
    db_link: String,
    /// This side's end of the client link.
    client_link: String,
    /// The subnet's third octet: this side is `10.203.<n>.1` (database) and `.5` (clients),
    /// the namespace's side `.2` and `.6`.
    n: u8,
}

impl Host {
    /// Makes the namespace and its two links, both up. Fails the test, naming what to
    /// install or which rights are missing, when it cannot.
    pub fn new() -> Host {
        sweep();
        let pid = std::process::id();
        let n = (pid % 250) as u8 + 1;
        let host = Host {
            name: format!("{PREFIX}-{pid}"),
            db_link: format!("{PREFIX}d{pid}"),
            client_link: format!("{PREFIX}c{pid}"),
            n,
        };
        ip(&["netns", "add", &host.name]);
        for (link, this_side, that_side) in [
            (&host.db_link, host.db_side(), host.db_node_side()),
            (&host.client_link, host.client_side(), host.node_address()),
        ] {
            let peer = format!("{link}p");
            ip(&["link", "add", link, "type", "veth", "peer", "name", &peer]);
            ip(&["link", "set", &peer, "netns", &host.name]);
            ip(&["addr", "add", &format!("{this_side}/30"), "dev", link]);
            ip(&["link", "set", link, "up"]);
            host.ip_in(&["addr", "add", &format!("{that_side}/30"), "dev", &peer]);
            host.ip_in(&["link", "set", &peer, "up"]);
        }
        host.ip_in(&["link", "set", "lo", "up"]);
        host
    }

    /// This side's address on the database link: the database listens there for the node.
    pub fn db_side(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 203, self.n, 1)
    }

    fn db_node_side(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 203, self.n, 2)
    }

    /// This side's address on the client link: a receiver that the node and the nodes on
    /// this side both reach listens there.
    pub fn client_side(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 203, self.n, 5)
    }

    /// The node's address on the client link: it listens there, and its webhooks come from
    /// there.
    pub fn node_address(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 203, self.n, 6)
    }

    /// The subnet of the database link, for the database's `pg_hba.conf`.
    pub fn db_subnet(&self) -> String {
        format!("10.203.{}.0/30", self.n)
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Takes the database link down: from now on nothing passes between the node and the
    /// database, in either direction, and nothing says so to either side.
    pub fn cut(&self) {
        ip(&["link", "set", &self.db_link, "down"]);
    }

    /// Brings the database link back up.
    pub fn restore(&self) {
        ip(&["link", "set", &self.db_link, "up"]);
    }

    fn ip_in(&self, args: &[&str]) {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes the other; the namespace takes its ends.
        for link in [&self.db_link, &self.client_link] {
            let _ = Command::new("ip").args(["link", "del", link]).output();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Runs `ip args`; fails the test with what it printed.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|err| {
            panic!("cannot run `ip` ({err}): install Debian's iproute2 (.ci/run does)")
        });
    assert!(
        out.status.success(),
        "`ip {}` failed: {} (this test needs root, or CAP_NET_ADMIN, to make a network \
         namespace, as CI has)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Removes the namespaces (and their links) of earlier test processes that are gone.
fn sweep() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        for link in [format!("{PREFIX}d{pid}"), format!("{PREFIX}c{pid}")] {
            let _ = Command::new("ip").args(["link", "del", &link]).output();
        }
        let _ = Command::new("ip").args(["netns", "del", name]).output();
    }
}
