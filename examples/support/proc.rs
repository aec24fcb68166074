//! What the load tools (`loadbench`, `quicbench`, `bwbench`, `namesbench`)
//! read about a process from /proc, the median they report, and a free
//! loopback port for the proxies they start. Included by each tool with
//! `#[path]`; not an example of its own.
//!
//! Not here: starting or stopping processes, or anything that measures
//! traffic.

/// A process's user + system CPU time in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is field 3, utime 14, stime 15 (in clock ticks).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let mut fields = rest.split_whitespace().skip(11);
    let mut tick = || {
        fields
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let (utime, stime) = (tick(), tick());
    // CLK_TCK is 100 on every Linux this runs on.
    (utime + stime) / 100.0
}

/// One CPU's time since boot from /proc/stat, in clock ticks: busy in
/// user space (user + nice), in the kernel for processes (system), in
/// interrupts (irq + softirq: on loopback, delivering what the CPU's
/// processes sent), and idle (idle + iowait).
#[derive(Clone, Copy, Default)]
#[allow(dead_code)] // loadbench's only
pub(crate) struct CoreTicks {
    pub user: u64,
    pub system: u64,
    pub interrupts: u64,
    pub idle: u64,
}

#[allow(dead_code)] // loadbench's only
impl CoreTicks {
    /// `cpu`'s counters now.
    pub(crate) fn read(cpu: usize) -> CoreTicks {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let name = format!("cpu{cpu}");
        let v: Vec<u64> = stat
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .map(|l| {
                l.split_whitespace()
                    .skip(1)
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        CoreTicks {
            user: at(0) + at(1),
            system: at(2),
            interrupts: at(5) + at(6),
            idle: at(3) + at(4),
        }
    }

    /// The ticks from `earlier` to `self`.
    pub(crate) fn since(self, earlier: CoreTicks) -> CoreTicks {
        CoreTicks {
            user: self.user - earlier.user,
            system: self.system - earlier.system,
            interrupts: self.interrupts - earlier.interrupts,
            idle: self.idle - earlier.idle,
        }
    }

    /// Every tick counted.
    pub(crate) fn total(self) -> u64 {
        self.user + self.system + self.interrupts + self.idle
    }

    /// Share of `total` (0..1) of a count.
    pub(crate) fn share(self, ticks: u64) -> f64 {
        ticks as f64 / self.total().max(1) as f64
    }
}

/// A process's context switches, all its threads summed: voluntary (it
/// blocked, e.g. in epoll_wait with nothing ready, and had to be woken)
/// and involuntary (preempted).
#[allow(dead_code)] // loadbench's only
pub(crate) fn context_switches(pid: u32) -> (u64, u64) {
    let mut total = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return total;
    };
    for task in tasks.flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        total.0 += field_value(&status, "voluntary_ctxt_switches:");
        total.1 += field_value(&status, "nonvoluntary_ctxt_switches:");
    }
    total
}

/// Inter-processor interrupts `cpu` has received since boot: rescheduling
/// (another CPU woke a task here) and function-call ones, from
/// /proc/interrupts. In a virtual machine each costs an exit to the host.
#[allow(dead_code)] // loadbench's only
pub(crate) fn ipis(cpu: usize) -> u64 {
    let text = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    text.lines()
        .filter(|l| matches!(l.split_whitespace().next(), Some("RES:" | "CAL:")))
        .filter_map(|l| l.split_whitespace().nth(1 + cpu)?.parse::<u64>().ok())
        .sum()
}

/// A process's resident set in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    field_value(&status, "VmRSS:")
}

/// A /proc/meminfo value in KiB.
#[allow(dead_code)] // loadbench's only
pub(crate) fn meminfo_kib(key: &str) -> u64 {
    field_value(&std::fs::read_to_string("/proc/meminfo").unwrap(), key)
}

/// The first number after `key` on the line that starts with it.
fn field_value(text: &str, key: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// How many descriptors a process holds.
pub(crate) fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The median of `v` (NaN when empty).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        f64::NAN
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    }
}

/// A loopback TCP port free when asked (the proxies a tool starts listen
/// on it).
#[allow(dead_code)] // not quicbench's
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// sozu's worker under its main process `main`, from /proc: the child
/// whose command line names `worker` (the main process also forks a
/// short-lived helper, which can linger as a zombie).
#[allow(dead_code)] // loadbench's and namesbench's only
pub(crate) fn sozu_worker(main: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Field 4 (ppid) follows the state, after the parenthesised name.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let worker = cmdline.split(|&b| b == 0).any(|arg| arg == b"worker");
        (ppid == main && worker).then_some(pid)
    })
}
