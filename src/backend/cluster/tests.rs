//! Unit tests of the cluster lookup cache ([`super::Cache`]): local
//! overrides, refreshes, `allowed_targets`, `this_node`, each endpoint's
//! place for Gerbil's pick, failing lookups, a full cache and its two
//! shares, and the lookup bounds (`max_lookups_in_flight`,
//! `new_names_per_second`; those against a lookup service on loopback
//! that never answers).

use super::table::{MAX_ENTRIES, MAX_UNANSWERED, NameSlot, UNANSWERED_BATCH};
use super::*;

fn cache(url: &str) -> Cache {
    Cache::new(
        "c",
        &Cluster {
            lookup: ClusterLookup::Http {
                url: url.into(),
                resolver: None,
            },
            local_backend: None,
            positive_ttl: Duration::from_secs(30),
            negative_ttl: Duration::from_secs(2),
            lookup_timeout: Duration::from_secs(2),
            allowed_targets: vec!["127.0.0.0/8".parse().unwrap()],
            max_lookups_in_flight: 16,
            new_names_per_second: 50,
            protocol: super::super::ClusterProtocol::Snirelay,
            headers: vec![],
            tls: None,
            node_choice: Default::default(),
            local_overrides: Vec::new(),
            hop_proxy_protocol: crate::proxy::outbound::Outbound::V2,
            this_node: Vec::new(),
        },
    )
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[tokio::test]
async fn overrides_are_local_without_a_lookup_and_forget_drops_answers() {
    let mut config = cache("http://127.0.0.1:1/resolve").config;
    config.local_overrides = vec![
        crate::wire::sni::Pattern::parse("exact.override.test").unwrap(),
        crate::wire::sni::Pattern::parse("*.below.override.test").unwrap(),
    ];
    let without_local = Cache::new("c", &config);
    assert!(!without_local.is_local_name("exact.override.test"));
    config.local_backend = Some("here".into());
    let cache = Cache::new("c", &config);
    let here = IpAddr::from([127, 0, 0, 1]);
    for name in ["exact.override.test", "a.b.below.override.test"] {
        assert!(cache.is_local_name(name), "{name}");
        // The lookup URL refuses connections: an answer means no lookup.
        assert!(matches!(cache.lookup(name, here).await, Ok(Answer::Local)));
    }
    assert!(!cache.is_local_name("below.override.test"));
    assert!(!cache.is_local_name("other.override.test"));
    assert!(cache.is_empty(), "nothing cached for local names");

    set(&cache, "x.test", Some(Duration::from_secs(60)), true);
    set(&cache, "y.test", Some(Duration::from_secs(60)), true);
    assert_eq!(cache.forget(["x.test", "unknown.test"]), 1);
    assert_eq!(cache.len(), 1);
}

fn nodes(entry: &CacheEntry) -> AddressSet {
    match &entry.stored {
        Some(CachedAnswer::Nodes { set, .. }) => set.clone(),
        other => panic!("not nodes: {other:?}"),
    }
}

#[test]
fn refreshes_keep_endpoint_state_and_a_reordered_set() {
    let cache = cache("http://127.0.0.1:1/resolve");
    let slot = cache.slot("www.example.com");
    let mut entry = slot.entry();
    let ttl = Duration::from_secs(30);
    let (a, b, c) = (
        addr("127.0.0.2:443"),
        addr("127.0.0.3:443"),
        addr("127.0.0.4:443"),
    );
    cache.learn(
        "www.example.com",
        &mut entry,
        Ok(Found::Nodes(Reached::each(&[a, b], false), ttl)),
    );
    let first = nodes(&entry);
    cache.learn(
        "www.example.com",
        &mut entry,
        Ok(Found::Nodes(Reached::each(&[b, a], false), ttl)),
    );
    assert!(
        Arc::ptr_eq(&first, &nodes(&entry)),
        "reordered: kept as it was"
    );
    cache.learn(
        "www.example.com",
        &mut entry,
        Ok(Found::Nodes(Reached::each(&[c, b], false), ttl)),
    );
    let next = nodes(&entry);
    assert_eq!(next.len(), 2);
    assert!(
        Arc::ptr_eq(&next[1].state, &first[1].state),
        "b keeps its state"
    );
    // A failure keeps the set (stale) and retries after negative_ttl.
    let before = Instant::now();
    cache.learn(
        "www.example.com",
        &mut entry,
        Err(QueryError::Http(cluster_http::HttpError::Body)),
    );
    assert!(Arc::ptr_eq(&next, &nodes(&entry)));
    assert!(entry.failing);
    assert!(entry.fresh_until >= before + cache.config.negative_ttl);
}

#[test]
fn answers_outside_allowed_targets_are_dropped_and_this_node_is_local_over_dns() {
    let mut config = cache("http://127.0.0.1:1/").config;
    config.lookup = ClusterLookup::Dns {
        server: addr("127.0.0.1:53"),
        port: 443,
    };
    let cache = Cache::new("c", &config);
    let slot = cache.slot("www.example.com");
    let mut entry = slot.entry();
    let ttl = Duration::from_secs(30);
    let far = addr("10.9.9.9:443");
    let here = addr("127.0.0.1:443");
    cache.learn(
        "www.example.com",
        &mut entry,
        Ok(Found::Nodes(Reached::each(&[far], true), ttl)),
    );
    let stored = entry.stored.clone().unwrap();
    let local = IpAddr::from([127, 0, 0, 1]);
    assert_eq!(
        cache.serve(&stored, local).unwrap_err(),
        LookupError::TargetNotAllowed
    );
    assert!(
        entry.fresh_until <= Instant::now() + config.negative_ttl,
        "refusals are short-lived"
    );
    cache.learn(
        "www.example.com",
        &mut entry,
        Ok(Found::Nodes(Reached::each(&[far, here], true), ttl)),
    );
    let stored = entry.stored.clone().unwrap();
    assert!(matches!(cache.serve(&stored, local), Ok(Answer::Local)));
    // Dialled on another address (an IPv4-mapped one counts as IPv4).
    let mapped = "::ffff:127.0.0.1".parse().unwrap();
    assert!(matches!(cache.serve(&stored, mapped), Ok(Answer::Local)));
    match cache.serve(&stored, IpAddr::from([127, 0, 0, 9])) {
        Ok(Answer::Remote(nodes)) => assert_eq!(nodes.set.len(), 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn this_node_is_recognised_whatever_the_client_dialled_and_never_dialled() {
    // A node behind a published port or a 1:1 NAT: the relay sees a
    // private address, the control plane answers the public one.
    let mut config = cache("http://127.0.0.1:1/resolve").config;
    config.local_backend = Some("traefik".into());
    config.allowed_targets = vec!["198.51.100.20/32".parse().unwrap()];
    let public = IpAddr::from([203, 0, 113, 10]);
    config.this_node = vec![crate::config::NodeAddress::Ip(public)];
    let cache = Cache::new("c", &config);
    let slot = cache.slot("site.example.com");
    let mut entry = slot.entry();
    let ttl = Duration::from_secs(30);
    let dialled = IpAddr::from([172, 30, 0, 3]);
    let other = addr("198.51.100.20:443");
    // A literal address at any port, alone or beside another node's.
    for answer in [
        vec![addr("203.0.113.10:443")],
        vec![other, addr("203.0.113.10:8443")],
    ] {
        cache.learn(
            "site.example.com",
            &mut entry,
            Ok(Found::Nodes(Reached::each(&answer, false), ttl)),
        );
        let stored = entry.stored.clone().unwrap();
        assert!(matches!(cache.serve(&stored, dialled), Ok(Answer::Local)));
        match &stored {
            CachedAnswer::Nodes { set, .. } => {
                assert!(set.iter().all(|e| e.addr.ip() != public), "{set:?}")
            }
            other => panic!("{other:?}"),
        }
    }
    // A name one of whose addresses is this node's.
    cache.learn(
        "site.example.com",
        &mut entry,
        Ok(Found::Nodes(
            vec![Reached {
                name: Some("node-a.example.net".into()),
                addrs: vec![addr("203.0.113.10:443")],
                names_node: true,
            }],
            ttl,
        )),
    );
    let stored = entry.stored.clone().unwrap();
    assert!(matches!(cache.serve(&stored, dialled), Ok(Answer::Local)));
    // Another node: remote, even when the client dialled that node's
    // address here (with `this_node` set, the dialled address says
    // nothing).
    cache.learn(
        "site.example.com",
        &mut entry,
        Ok(Found::Nodes(Reached::each(&[other], true), ttl)),
    );
    let stored = entry.stored.clone().unwrap();
    match cache.serve(&stored, other.ip()) {
        Ok(Answer::Remote(nodes)) => assert_eq!(nodes.set.len(), 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_endpoint_of_the_answer_keeps_its_place_for_gerbils_pick() {
    let cache = cache("http://127.0.0.1:1/resolve");
    let (a2, a3, a4, a5) = (
        addr("127.0.0.2:443"),
        addr("127.0.0.3:443"),
        addr("127.0.0.4:443"),
        addr("127.0.0.5:443"),
    );
    let far = addr("10.9.9.9:443");
    let name = |n: &str, addrs: Vec<SocketAddr>| Reached {
        name: Some(n.into()),
        addrs,
        names_node: true,
    };
    // A name with two addresses, a literal, a name that did not
    // resolve, a name with a forbidden address, a repeat, and a name
    // whose only address is forbidden.
    let reached = vec![
        name("a.test", vec![a2, a3]),
        Reached::each(&[a4], false).remove(0),
        name("gone.test", vec![]),
        name("b.test", vec![far, a5]),
        name("again.test", vec![a3]),
        name("far.test", vec![far]),
    ];
    let (allowed, starts, here, _) = cache.admit("www.example.com", &reached);
    assert_eq!(allowed, [a2, a3, a4, a5]);
    assert_eq!(starts, [0, 2, 3, 3, 1, 4]);
    // A literal is never this node; a name's addresses are.
    assert!(!here.contains(&a4.ip()));
    assert!(here.contains(&a2.ip()) && here.contains(&far.ip()));
    let nodes = Nodes {
        set: carry(&[], &allowed),
        starts: starts.into(),
    };
    // Endpoint k = FNV-1a(client) % 6, then its first allowed address.
    for port in 40_000..40_200u16 {
        let client = SocketAddr::from(([192, 0, 2, 7], port));
        let k = (super::super::node_order::fnv1a_32(client.to_string().as_bytes()) % 6) as usize;
        let want = [0, 2, 3, 3, 1, 4][k] % 4;
        assert_eq!(nodes.gerbil_first(client, false), want, "{client}");
    }
}

fn set(cache: &Cache, name: &str, fresh_for: Option<Duration>, stale: bool) -> Arc<NameSlot> {
    let slot = cache.slot(name);
    let now = Instant::now();
    let mut entry = slot.entry();
    entry.stored = Some(CachedAnswer::Here);
    entry.fresh_until = match fresh_for {
        Some(d) => now + d,
        None => now - Duration::from_millis(1),
    };
    entry.stale_until = if stale {
        entry.fresh_until + MAX_STALE
    } else {
        entry.fresh_until
    };
    drop(entry);
    cache.table().settle(name, &slot, now);
    slot
}

#[test]
fn lookups_are_failing_only_while_no_name_has_an_answer_to_serve() {
    let cache = cache("http://127.0.0.1:1/resolve");
    assert!(!cache.failing(), "nothing looked up yet");
    {
        let slot = cache.slot("down.example.com");
        let mut entry = slot.entry();
        entry.stored = Some(CachedAnswer::NoNode);
        entry.failing = true;
    }
    assert!(cache.failing());
    let answered = set(
        &cache,
        "up.example.com",
        Some(Duration::from_secs(30)),
        false,
    );
    assert!(!cache.failing(), "one name still has an answer");
    {
        let mut entry = answered.entry();
        entry.fresh_until = Instant::now() - Duration::from_millis(1);
        entry.stale_until = entry.fresh_until + MAX_STALE;
    }
    assert!(!cache.failing(), "a stale answer is still served");
    answered.entry().stale_until = Instant::now() - Duration::from_millis(1);
    assert!(cache.failing(), "nothing left to serve");
}

#[test]
fn a_full_cache_drops_dead_entries_then_the_soonest_to_expire() {
    let cache = cache("http://127.0.0.1:1/resolve");
    // Half dead (expired, nothing to serve stale), a quarter stale,
    // a quarter fresh; one dead name has a lookup in flight.
    for i in 0..MAX_ENTRIES {
        let (fresh, stale) = match i % 4 {
            0 | 1 => (None, false),
            2 => (None, true),
            _ => (Some(Duration::from_secs(60 + i as u64)), true),
        };
        set(&cache, &format!("n{i}.example.com"), fresh, stale);
    }
    let busy = cache.slot("n0.example.com");
    let flight = busy.flight.try_lock().unwrap();
    assert_eq!(cache.table().answered_len(), MAX_ENTRIES);
    set(
        &cache,
        "new.example.com",
        Some(Duration::from_secs(60)),
        true,
    );
    assert_eq!(
        cache.table().answered_len(),
        MAX_ENTRIES / 2 + 2,
        "dead entries dropped"
    );
    drop(flight);
    let table = cache.table();
    assert!(table.get("n0.example.com").is_some(), "in flight: kept");
    assert!(table.get("n2.example.com").is_some(), "stale: kept");
    assert!(table.get("n1.example.com").is_none());
    drop(table);

    // Full of live entries: batches go, the soonest to expire first
    // (stale ones before fresh ones), and the table stays bounded.
    for i in 0..MAX_ENTRIES {
        let name = format!("m{i}.example.com");
        set(&cache, &name, Some(Duration::from_secs(3600)), true);
        assert!(cache.len() <= MAX_ENTRIES);
    }
    let table = cache.table();
    let left = |rest: usize| {
        (0..MAX_ENTRIES)
            .filter(|i| i % 4 == rest && table.get(&format!("n{i}.example.com")).is_some())
            .count()
    };
    let (stale, fresh) = (left(2), left(3));
    assert!(
        stale == 0 || fresh == MAX_ENTRIES / 4,
        "stale {stale}, fresh {fresh}"
    );
    assert!(stale < MAX_ENTRIES / 4, "nothing was evicted");
    assert!(
        table
            .get(&format!("m{}.example.com", MAX_ENTRIES - 1))
            .is_some()
    );
}

/// Records a finished lookup of `name` that found no node, as `lookup`
/// does (the entry, then its share).
fn negative(cache: &Cache, name: &str) {
    let slot = cache.slot(name);
    let mut entry = slot.entry();
    cache.learn(name, &mut entry, Ok(Found::Nowhere));
    drop(entry);
    cache.table().settle(name, &slot, Instant::now());
}

#[test]
fn names_that_did_not_resolve_never_evict_answers() {
    let cache = cache("http://127.0.0.1:1/resolve");
    // A full share of answers, every one stale but servable (the control
    // plane is down: these are what keeps the sites up).
    for i in 0..MAX_ENTRIES {
        set(&cache, &format!("site{i}.example.com"), None, true);
    }
    // Ten times that many names that resolved to nothing, failed, or are
    // still pending: each takes a place among the unanswered only.
    let mut sweeps = 0;
    for i in 0..10 * MAX_ENTRIES {
        let name = format!("junk{i}.example.com");
        let before = cache.len();
        match i % 3 {
            0 => negative(&cache, &name),
            1 => {
                let slot = cache.slot(&name);
                let mut entry = slot.entry();
                cache.learn(
                    &name,
                    &mut entry,
                    Err(QueryError::Http(cluster_http::HttpError::Body)),
                );
                drop(entry);
                cache.table().settle(&name, &slot, Instant::now());
            }
            _ => drop(cache.slot(&name)),
        }
        if cache.len() < before {
            sweeps += 1;
        }
        assert!(cache.table().answered_len() == MAX_ENTRIES, "{name}");
        assert!(cache.len() <= MAX_ENTRIES + MAX_UNANSWERED, "{name}");
    }
    // Live negatives go an eighth of the share at a time: one sweep per
    // batch of new names, not one per name.
    assert!(
        sweeps <= 10 * MAX_ENTRIES / UNANSWERED_BATCH + 1,
        "{sweeps} sweeps"
    );
    let table = cache.table();
    assert!((0..MAX_ENTRIES).all(|i| table.is_answered(&format!("site{i}.example.com"))));
    drop(table);

    // An answer that turns negative moves to the unanswered share; one
    // that resolves moves to the answers, making room among them only.
    negative(&cache, "site0.example.com");
    assert!(!cache.table().is_answered("site0.example.com"));
    assert_eq!(cache.table().answered_len(), MAX_ENTRIES - 1);
    let name = "junk2.example.com";
    let slot = cache.slot(name);
    let mut entry = slot.entry();
    let ttl = Duration::from_secs(30);
    let a = addr("127.0.0.2:443");
    cache.learn(
        name,
        &mut entry,
        Ok(Found::Nodes(Reached::each(&[a], false), ttl)),
    );
    drop(entry);
    cache.table().settle(name, &slot, Instant::now());
    assert!(cache.table().is_answered(name));
}

#[tokio::test]
async fn lookups_in_flight_are_bounded_and_a_refused_name_leaves_nothing() {
    let service = Silent::start().await;
    let mut config = cache(&service.url()).config;
    config.max_lookups_in_flight = 2;
    config.new_names_per_second = 100;
    config.lookup_timeout = Duration::from_secs(60);
    let cache = Arc::new(Cache::new("limits_in_flight", &config));
    let here = IpAddr::from([127, 0, 0, 1]);
    set(
        &cache,
        "fresh.example.com",
        Some(Duration::from_secs(60)),
        true,
    );
    set(&cache, "stale.example.com", None, true);
    let cached = cache.len();
    let hung: Vec<_> = ["a.example.com", "b.example.com"]
        .into_iter()
        .map(|name| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.lookup(name, here).await })
        })
        .collect();
    service.wait_requests(2).await;
    assert_eq!(cache.limits.running(2), 2);

    // A third new name: refused at once, without a lookup or an entry.
    let refused = metrics::metrics().lookups_limited("limits_in_flight", "in_flight");
    assert_eq!(
        cache.lookup("c.example.com", here).await.unwrap_err(),
        LookupError::Limited
    );
    assert_eq!(refused.get(), 1);
    assert!(cache.table().get("c.example.com").is_none());
    assert_eq!(cache.len(), cached + 2, "the two pending names only");
    // A fresh name needs no lookup; a stale one whose refresh is refused
    // is served its answer.
    assert!(matches!(
        cache.lookup("fresh.example.com", here).await,
        Ok(Answer::Local)
    ));
    assert!(matches!(
        cache.lookup("stale.example.com", here).await,
        Ok(Answer::Local)
    ));
    assert_eq!(refused.get(), 2, "the refresh was refused too");
    assert_eq!(service.requests(), 2);

    // A lookup that ends gives its place back.
    for task in hung {
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
    }
    assert_eq!(cache.limits.running(2), 0);
    let late = cache.clone();
    let task = tokio::spawn(async move { late.lookup("c.example.com", here).await });
    service.wait_requests(3).await;
    task.abort();
}

#[tokio::test]
async fn new_names_are_looked_up_at_the_rate_and_cached_names_never_count() {
    let service = Silent::start().await;
    let mut config = cache(&service.url()).config;
    config.max_lookups_in_flight = 100;
    config.new_names_per_second = 3;
    config.lookup_timeout = Duration::from_secs(60);
    let cache = Arc::new(Cache::new("limits_rate", &config));
    let here = IpAddr::from([127, 0, 0, 1]);
    // The burst: one second's worth.
    let hung: Vec<_> = (0..3)
        .map(|i| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.lookup(&format!("n{i}.example.com"), here).await })
        })
        .collect();
    service.wait_requests(3).await;
    let refused = metrics::metrics().lookups_limited("limits_rate", "new_names");
    assert_eq!(
        cache.lookup("n3.example.com", here).await.unwrap_err(),
        LookupError::Limited
    );
    assert_eq!(refused.get(), 1);
    assert!(cache.table().get("n3.example.com").is_none());
    assert_eq!(
        cache.limits.running(100),
        3,
        "the refused name's permit given back"
    );
    // A stale answer's refresh takes a permit but no token.
    set(&cache, "stale.example.com", None, true);
    let stale = cache.clone();
    let refresh = tokio::spawn(async move { stale.lookup("stale.example.com", here).await });
    service.wait_requests(4).await;
    assert_eq!(refused.get(), 1);
    for task in hung.into_iter().chain([refresh]) {
        task.abort();
    }
}

#[test]
fn the_new_name_bucket_refills_at_the_rate_and_holds_one_seconds_worth() {
    let t0 = Instant::now();
    let limits = limit::Limits::new("limits_bucket", 1_000, 5, t0);
    let take = |at: Instant, n: usize| (0..n).filter(|_| limits.admit(true, at).is_ok()).count();
    assert_eq!(take(t0, 10), 5, "the burst");
    assert_eq!(
        limits.admit(true, t0).unwrap_err(),
        limit::Limited::NewNames
    );
    assert!(limits.admit(false, t0).is_ok(), "a refresh takes no token");
    assert_eq!(take(t0 + Duration::from_millis(200), 10), 1);
    assert_eq!(take(t0 + Duration::from_millis(1_200), 10), 5);
    // A long quiet spell refills one second's worth, no more.
    assert_eq!(take(t0 + Duration::from_secs(60), 100), 5);
    // Over 10 s: at most rate x seconds + burst.
    let mut admitted = 0;
    for ms in (0..10_000u64).step_by(10) {
        admitted += take(t0 + Duration::from_secs(61) + Duration::from_millis(ms), 3);
    }
    assert!(admitted <= 5 * 10 + 5, "{admitted}");
    assert!(admitted >= 5 * 10, "{admitted}");
}

/// A lookup service on loopback that counts requests and never answers.
struct Silent {
    addr: SocketAddr,
    requests: Arc<std::sync::atomic::AtomicUsize>,
    arrived: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Silent {
    async fn start() -> Silent {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (count, notify) = (requests.clone(), arrived.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (count, notify) = (count.clone(), notify.clone());
                tokio::spawn(async move {
                    // A request has arrived once its first bytes have;
                    // the connection is then held open, unanswered.
                    let mut buf = [0u8; 1024];
                    if stream.read(&mut buf).await.unwrap_or(0) > 0 {
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        notify.notify_waiters();
                    }
                    let _ = stream.read_to_end(&mut Vec::new()).await;
                });
            }
        });
        Silent {
            addr,
            requests,
            arrived,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/resolve", self.addr)
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits (at most 5 s) until `n` requests arrived.
    async fn wait_requests(&self, n: usize) {
        let wait = async {
            loop {
                let arrived = self.arrived.notified();
                if self.requests() >= n {
                    return;
                }
                arrived.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .unwrap_or_else(|_| panic!("{} request(s), expected {n}", self.requests()));
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[test]
fn an_entry_costs_what_the_table_header_says() {
    // The shared slot, its `Arc` header aside (see the header of
    // [`super::table`]); a change here is a change to the figures there.
    assert!(std::mem::size_of::<NameSlot>() <= 160);
    assert!(std::mem::size_of::<super::super::Endpoint>() <= 56);
}
