//! SimGrid platform files: the equivalent of a [`Network`] of the
//! simulator, and two topologies only SimGrid models (a fat tree with
//! oversubscribed racks, a dragonfly).

use super::trace::HOST_SPEED;
use crate::sim::{AlphaBeta, FullBisection, Link, Network, Route, TwoLevel};
use sparse_core::{Error, Result};
use std::fmt::Write as _;

/// A SimGrid platform of `ranks` ranks: its XML ([`Platform::xml`]) and
/// the host of every rank ([`Platform::hostfile`]).
///
/// Latencies: a route's latency in SimGrid is the sum of its links'. The
/// cluster and the nodes split the network's `alpha` over the two links a
/// message crosses (its sender's and its receiver's), so one message takes
/// `alpha + m beta` as in the simulator; the fat tree and the dragonfly
/// give each link an equal share of `alpha`, so that their longest route
/// (4 links and 5) takes `alpha` and shorter ones less.
#[derive(Debug, Clone, PartialEq)]
pub enum Platform {
    /// Full bisection ([`crate::sim::FullBisection`]): a host per rank,
    /// each with its own link each way (SimGrid's `SPLITDUPLEX` private
    /// links of a `<cluster>`), joined by a backbone that limits nothing
    /// (`FATPIPE`: every flow may use its whole bandwidth, set to the
    /// links' times the ranks).
    Cluster {
        /// Every link's latency and bandwidth.
        link: AlphaBeta,
    },
    /// Two levels ([`crate::sim::TwoLevel`]): a host per node, its ranks on
    /// its cores; between ranks of a node the host's loopback (latency and
    /// bandwidth of the intra-node link; `FATPIPE`, so no two flows share
    /// it), across nodes the host's private link each way, which all its
    /// ranks share (the node's NIC), joined by a backbone that limits
    /// nothing.
    Nodes {
        /// Ranks per node (the last node may hold fewer).
        ranks_per_node: usize,
        /// Between ranks of a node.
        intra: AlphaBeta,
        /// Each node's NIC.
        inter: AlphaBeta,
    },
    /// A two-level fat tree (SimGrid's `FAT_TREE` cluster): racks of
    /// `rack` ranks under a leaf switch, each rank on its own link; each
    /// leaf has `rack / oversubscription` links up, one to each spine
    /// switch, all links alike, so traffic between racks has
    /// `1 / oversubscription` of the bandwidth of the ranks of a rack.
    /// Routes are SimGrid's (d-mod-k over the spines).
    FatTree {
        /// Every link's latency and bandwidth; a route's latency is that of
        /// its links: `alpha / 4` each (4 links between racks, 2 within).
        link: AlphaBeta,
        /// Ranks per rack (leaf switch).
        rack: usize,
        /// Bandwidth of a rack's ranks over its uplinks' (1: full
        /// bisection).
        oversubscription: usize,
    },
    /// A dragonfly (SimGrid's `DRAGONFLY` cluster, minimal routing):
    /// routers of 4 ranks, groups of 16 routers joined all to all (one
    /// link between each two), and the groups joined all to all by global
    /// links, as many between each two groups as give a group as much
    /// global bandwidth as its ranks inject (a balanced dragonfly, Kim et
    /// al. 2008). Groups fill up first: up to 64 ranks are one group.
    Dragonfly {
        /// Every link's latency and bandwidth; `alpha / 5` each (the
        /// longest route: rank, router, global link, router, rank).
        link: AlphaBeta,
    },
}

/// Ranks per router of [`Platform::Dragonfly`].
pub const DRAGONFLY_RANKS_PER_ROUTER: usize = 4;
/// Routers per group of [`Platform::Dragonfly`]; SimGrid joins group `j`
/// to router `j` of every other group, so there are at most this many
/// groups.
pub const DRAGONFLY_ROUTERS_PER_GROUP: usize = 16;

/// The file's head.
const HEAD: &str = "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \
                    \"https://simgrid.org/simgrid.dtd\">\n<platform version=\"4.1\">\n";

impl Platform {
    /// The platform equivalent to `net` for `ranks` ranks, read from its
    /// routes: every route must be that of a full-bisection network (each
    /// rank's own ports, one latency and bandwidth) or of a two-level one
    /// (nodes of consecutive ranks, the nodes' NICs across them).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `ranks` for 0 ranks; named
    /// `network` where a route fits neither (naming it): SimGrid has no
    /// equivalent written here; [`AlphaBeta::new`]'s where a route's
    /// constants are refused.
    pub fn of(net: &dyn Network, ranks: usize) -> Result<Self> {
        if ranks == 0 {
            return Err(Error::invalid(
                "ranks",
                "0: a platform holds at least one rank",
            ));
        }
        let link = |r: &Route| AlphaBeta::new(r.alpha, 1.0 / r.beta);
        let across = (1..ranks).find(|&b| matches!(net.route(0, b).out, Link::NodeOut(_)));
        let platform = match across {
            None => Platform::Cluster {
                link: link(&net.route(0, ranks.min(2) - 1))?,
            },
            Some(g) => Platform::Nodes {
                ranks_per_node: g,
                intra: if g > 1 {
                    link(&net.route(0, 1))?
                } else {
                    link(&net.route(0, 0))?
                },
                inter: link(&net.route(0, g))?,
            },
        };
        for a in 0..ranks {
            for b in 0..ranks {
                let (got, want) = (net.route(a, b), platform.route(a, b)?);
                if got != want {
                    return Err(Error::invalid(
                        "network",
                        format!(
                            "{}: the route from rank {a} to rank {b} ({got:?}) is not that of a \
                             full-bisection or two-level network ({want:?} expected), so no \
                             SimGrid platform is written for it",
                            net.label()
                        ),
                    ));
                }
            }
        }
        Ok(platform)
    }

    /// The simulator's network of this platform, named `name`, where the
    /// simulator has it (cluster and nodes): the network [`Platform::of`]
    /// reads back as this platform, without what SimGrid's platform has
    /// not (a token bucket, a send protocol).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `platform` for a fat tree or a
    /// dragonfly.
    pub fn network(&self, name: &str) -> Result<Box<dyn Network>> {
        match self {
            Platform::Cluster { link } => Ok(Box::new(FullBisection::new(name, *link))),
            Platform::Nodes {
                ranks_per_node,
                intra,
                inter,
            } => Ok(Box::new(TwoLevel::new(
                name,
                *ranks_per_node,
                *intra,
                *inter,
            )?)),
            _ => Err(Error::invalid(
                "platform",
                format!("{} has no network in the simulator", self.describe()),
            )),
        }
    }

    /// The simulator's route from `a` to `b` on this platform, where the
    /// simulator has the network (cluster and nodes).
    fn route(&self, a: usize, b: usize) -> Result<Route> {
        let make = |l: &AlphaBeta, out, into| Route {
            alpha: l.alpha(),
            beta: l.beta(),
            out,
            into,
        };
        match self {
            Platform::Cluster { link } => Ok(make(link, Link::RankOut(a), Link::RankIn(b))),
            Platform::Nodes {
                ranks_per_node: g,
                intra,
                inter,
            } => Ok(if a / g == b / g {
                make(intra, Link::RankOut(a), Link::RankIn(b))
            } else {
                make(inter, Link::NodeOut(a / g), Link::NodeIn(b / g))
            }),
            _ => Err(Error::invalid(
                "platform",
                format!("{} has no network in the simulator", self.describe()),
            )),
        }
    }

    /// One line saying what the platform is, with its constants.
    pub fn describe(&self) -> String {
        let ab = |l: &AlphaBeta| {
            format!(
                "alpha {:.3} us, {:.3} GB/s",
                l.alpha() * 1e6,
                1e-9 / l.beta()
            )
        };
        match self {
            Platform::Cluster { link } => format!("SimGrid cluster, private links ({})", ab(link)),
            Platform::Nodes {
                ranks_per_node,
                intra,
                inter,
            } => format!(
                "SimGrid cluster of nodes of {ranks_per_node} ranks (loopback {}; node NIC {})",
                ab(intra),
                ab(inter)
            ),
            Platform::FatTree {
                link,
                rack,
                oversubscription,
            } => format!(
                "SimGrid fat tree, racks of {rack}, {oversubscription}:1 oversubscribed ({}, alpha \
                 between racks)",
                ab(link)
            ),
            Platform::Dragonfly { link } => format!(
                "SimGrid dragonfly, {DRAGONFLY_RANKS_PER_ROUTER} ranks per router, \
                 {DRAGONFLY_ROUTERS_PER_GROUP} routers per group, balanced global links ({}, \
                 alpha between groups)",
                ab(link)
            ),
        }
    }

    /// Hosts of the platform for `ranks` ranks, and the host of rank `r`.
    fn hosts(&self, ranks: usize) -> (usize, impl Fn(usize) -> String + '_) {
        let per_host = match self {
            Platform::Nodes { ranks_per_node, .. } => *ranks_per_node,
            _ => 1,
        };
        let prefix = match self {
            Platform::Nodes { .. } => "node-",
            _ => "rank-",
        };
        (ranks.div_ceil(per_host), move |r: usize| {
            format!("{prefix}{}", r / per_host)
        })
    }

    /// The hostfile of `ranks` ranks: rank `r`'s host on line `r`.
    pub fn hostfile(&self, ranks: usize) -> String {
        let (_, host) = self.hosts(ranks);
        (0..ranks).map(|r| host(r) + "\n").collect()
    }

    /// The platform file for `ranks` ranks, after a comment `about` (the
    /// simulator's network label, say).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] named `ranks` for 0 ranks, or more
    /// ranks than a dragonfly of [`DRAGONFLY_ROUTERS_PER_GROUP`] groups
    /// holds; named `platform` for a fat tree whose rack is 0 or whose
    /// oversubscription does not divide its rack.
    pub fn xml(&self, ranks: usize, about: &str) -> Result<String> {
        if ranks == 0 {
            return Err(Error::invalid(
                "ranks",
                "0: a platform holds at least one rank",
            ));
        }
        let mut out = String::from(HEAD);
        let comment = format!("{about}; {}", self.describe()).replace("--", "- -");
        let _ = writeln!(out, "  <!-- {comment} -->");
        let (hosts, _) = self.hosts(ranks);
        let bw = |l: &AlphaBeta| format!("{:e}Bps", 1.0 / l.beta());
        let lat = |s: f64| format!("{s:e}s");
        let common = |id: &str, prefix: &str, n: usize| {
            format!(
                "<cluster id=\"{id}\" prefix=\"{prefix}\" suffix=\"\" radical=\"0-{}\" \
                 speed=\"{HOST_SPEED:e}f\" sharing_policy=\"SPLITDUPLEX\"",
                n - 1
            )
        };
        let line = match self {
            Platform::Cluster { link } => format!(
                "{} bw=\"{}\" lat=\"{}\" bb_bw=\"{:e}Bps\" bb_lat=\"0s\" bb_sharing_policy=\"FATPIPE\"/>",
                common("ranks", "rank-", hosts),
                bw(link),
                lat(link.alpha() / 2.0),
                ranks as f64 / link.beta()
            ),
            Platform::Nodes {
                ranks_per_node,
                intra,
                inter,
            } => format!(
                "{} core=\"{ranks_per_node}\" bw=\"{}\" lat=\"{}\" loopback_bw=\"{}\" \
                 loopback_lat=\"{}\" bb_bw=\"{:e}Bps\" bb_lat=\"0s\" bb_sharing_policy=\"FATPIPE\"/>",
                common("nodes", "node-", hosts),
                bw(inter),
                lat(inter.alpha() / 2.0),
                bw(intra),
                lat(intra.alpha()),
                hosts as f64 / inter.beta()
            ),
            Platform::FatTree {
                link,
                rack,
                oversubscription,
            } => {
                let (rack, spines) = fat_tree_shape(ranks, *rack, *oversubscription)?;
                let leaves = ranks.div_ceil(rack);
                format!(
                    "{} topology=\"FAT_TREE\" topo_parameters=\"2;{rack},{leaves};1,{spines};1,1\" \
                     bw=\"{}\" lat=\"{}\"/>",
                    common("fat-tree", "rank-", rack * leaves),
                    bw(link),
                    lat(link.alpha() / 4.0)
                )
            }
            Platform::Dragonfly { link } => {
                let d = dragonfly_shape(ranks)?;
                format!(
                    "{} topology=\"DRAGONFLY\" topo_parameters=\"{},{};1,1;{},1;{}\" bw=\"{}\" lat=\"{}\"/>",
                    common("dragonfly", "rank-", d.hosts()),
                    d.groups,
                    d.global_links,
                    d.routers,
                    d.ranks_per_router,
                    bw(link),
                    lat(link.alpha() / 5.0)
                )
            }
        };
        let _ = writeln!(out, "  {line}\n</platform>");
        Ok(out)
    }
}

/// The rack and spine count of a fat tree of `ranks` ranks: a rack of at
/// most `rack` ranks (all of them where fewer), `rack / oversubscription`
/// spines.
fn fat_tree_shape(ranks: usize, rack: usize, oversubscription: usize) -> Result<(usize, usize)> {
    if rack == 0 || oversubscription == 0 || !rack.is_multiple_of(oversubscription) {
        return Err(Error::invalid(
            "platform",
            format!(
                "a fat tree with racks of {rack} ranks and {oversubscription}:1 oversubscription: \
                 give a rack of at least 1 that the oversubscription divides"
            ),
        ));
    }
    let rack_here = rack.min(ranks);
    let spines = (rack / oversubscription).max(1);
    Ok((rack_here, spines))
}

/// The shape of a [`Platform::Dragonfly`] of some ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DragonflyShape {
    /// Groups.
    pub groups: usize,
    /// Links between each two groups.
    pub global_links: usize,
    /// Routers per group.
    pub routers: usize,
    /// Ranks per router.
    pub ranks_per_router: usize,
}

impl DragonflyShape {
    /// Hosts of the platform (at least the ranks).
    pub fn hosts(&self) -> usize {
        self.groups * self.routers * self.ranks_per_router
    }
}

/// The shape of a [`Platform::Dragonfly`] of `ranks` ranks: the groups
/// fill up first; a group's global bandwidth at least its ranks'.
///
/// # Errors
/// [`Error::InvalidParameter`] named `ranks` for more than
/// [`DRAGONFLY_ROUTERS_PER_GROUP`] full groups.
pub fn dragonfly_shape(ranks: usize) -> Result<DragonflyShape> {
    let per_group = DRAGONFLY_RANKS_PER_ROUTER * DRAGONFLY_ROUTERS_PER_GROUP;
    let groups = ranks.div_ceil(per_group).max(1);
    if groups > DRAGONFLY_ROUTERS_PER_GROUP {
        return Err(Error::invalid(
            "ranks",
            format!(
                "{ranks}: the dragonfly written here holds at most {} ranks ({} groups of {per_group})",
                DRAGONFLY_ROUTERS_PER_GROUP * per_group,
                DRAGONFLY_ROUTERS_PER_GROUP
            ),
        ));
    }
    let ranks_per_router = DRAGONFLY_RANKS_PER_ROUTER.min(ranks.max(1));
    let routers = if groups == 1 {
        ranks.max(1).div_ceil(ranks_per_router)
    } else {
        DRAGONFLY_ROUTERS_PER_GROUP
    };
    let global_links = if groups == 1 {
        1
    } else {
        per_group.div_ceil(groups - 1)
    };
    Ok(DragonflyShape {
        groups,
        global_links,
        routers,
        ranks_per_router,
    })
}
