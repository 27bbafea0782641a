//! The ranges Services allocate from: the cluster IP range (`--service-cluster-ip-range`, one
//! IPv4 or IPv6 CIDR) and the node port range (`--service-node-port-range`), as offsets.
//!
//! Invariants: an offset is in `[first_usable, end)`; for IPv4 the network and broadcast
//! addresses are never usable, for IPv6 the subnet address is not (upstream's bitmap
//! allocator); arithmetic is on `u128`, so every prefix length of either family fits.

use std::net::IpAddr;

/// Why a range flag was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// Not `ADDRESS/PREFIX`.
    #[error("{0:?} is not a CIDR (e.g. 10.0.0.0/24)")]
    NotCidr(String),
    /// Fewer than two usable addresses (the first is the `kubernetes` Service's).
    #[error("{0} is too small: it needs at least two usable addresses")]
    TooSmall(String),
    /// Not `FIRST-LAST` with `FIRST <= LAST`.
    #[error("{0:?} is not a port range (e.g. 30000-32767)")]
    NotPortRange(String),
}

/// One CIDR of cluster IPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The network address, as a number.
    base: u128,
    /// The prefix length.
    prefix: u8,
    /// IPv6 (else IPv4).
    v6: bool,
}

impl std::str::FromStr for Cidr {
    type Err = RangeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || RangeError::NotCidr(s.chars().take(64).collect());
        let (addr, prefix) = s.trim().split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        let (v6, bits, value) = match addr {
            IpAddr::V4(a) => (false, 32u8, u128::from(u32::from(a))),
            IpAddr::V6(a) => (true, 128u8, u128::from(a)),
        };
        if prefix > bits {
            return Err(bad());
        }
        let host_bits = u32::from(bits - prefix);
        let mask = if host_bits >= 128 {
            0
        } else {
            !((1u128 << host_bits) - 1)
        };
        let cidr = Self {
            base: value & mask,
            prefix,
            v6,
        };
        // The kubernetes Service's address and one more.
        if cidr.end().saturating_sub(cidr.first_usable()) < 2 {
            return Err(RangeError::TooSmall(cidr.to_string()));
        }
        Ok(cidr)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.ip(0), self.prefix)
    }
}

impl Cidr {
    fn bits(&self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    /// How many addresses the CIDR spans (saturating at `u128::MAX` for `::/0`).
    fn size(&self) -> u128 {
        let host_bits = u32::from(self.bits() - self.prefix);
        1u128.checked_shl(host_bits).unwrap_or(u128::MAX)
    }

    /// The first usable offset: 1 (the network address is never handed out).
    pub fn first_usable(&self) -> u128 {
        1
    }

    /// One past the last usable offset (IPv4's broadcast address is not usable).
    pub fn end(&self) -> u128 {
        if self.v6 {
            self.size()
        } else {
            self.size().saturating_sub(1)
        }
    }

    /// Whether the range is IPv6.
    pub fn is_v6(&self) -> bool {
        self.v6
    }

    /// The family's name as Services spell it (`IPv4`, `IPv6`).
    pub fn family(&self) -> &'static str {
        if self.v6 { "IPv6" } else { "IPv4" }
    }

    /// The address at `offset`.
    pub fn ip(&self, offset: u128) -> IpAddr {
        let v = self.base.wrapping_add(offset);
        if self.v6 {
            IpAddr::V6(v.into())
        } else {
            // A v4 base plus an offset below its size stays within 32 bits.
            IpAddr::V4(u32::try_from(v).unwrap_or(u32::MAX).into())
        }
    }

    /// The offset of `ip` when it is a usable address of this range.
    pub fn offset(&self, ip: IpAddr) -> Option<u128> {
        let v = match (ip, self.v6) {
            (IpAddr::V4(a), false) => u128::from(u32::from(a)),
            (IpAddr::V6(a), true) => u128::from(a),
            _ => return None,
        };
        let off = v.checked_sub(self.base)?;
        (off >= self.first_usable() && off < self.end()).then_some(off)
    }

    /// The offset where dynamic allocation starts (upstream's static sub-range: the lower
    /// `min(max(16, size/16), 256)` addresses are left for explicit requests first).
    pub fn dynamic_start(&self) -> u128 {
        let band = (self.size() / 16).clamp(16, 256);
        band.min(self.end().saturating_sub(1))
            .max(self.first_usable())
    }
}

/// A node port range, inclusive (upstream's `--service-node-port-range`, default 30000-32767).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// The first port.
    pub first: u16,
    /// The last port.
    pub last: u16,
}

impl Default for PortRange {
    fn default() -> Self {
        Self {
            first: 30000,
            last: 32767,
        }
    }
}

impl std::str::FromStr for PortRange {
    type Err = RangeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || RangeError::NotPortRange(s.chars().take(64).collect());
        let (a, b) = s.trim().split_once('-').ok_or_else(bad)?;
        let first: u16 = a.trim().parse().map_err(|_| bad())?;
        let last: u16 = b.trim().parse().map_err(|_| bad())?;
        if first == 0 || first > last {
            return Err(bad());
        }
        Ok(Self { first, last })
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_ranges_skip_the_network_and_broadcast_addresses() {
        let c: Cidr = "10.0.0.7/24".parse().unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/24");
        assert_eq!(c.ip(c.first_usable()).to_string(), "10.0.0.1");
        assert_eq!(c.ip(c.end() - 1).to_string(), "10.0.0.254");
        assert_eq!(c.offset("10.0.0.255".parse().unwrap()), None);
        assert_eq!(c.offset("10.0.0.0".parse().unwrap()), None);
        assert_eq!(c.offset("10.0.1.1".parse().unwrap()), None);
        assert_eq!(c.offset("10.0.0.9".parse().unwrap()), Some(9));
        assert_eq!(c.dynamic_start(), 16);
    }

    #[test]
    fn ipv6_and_odd_ranges() {
        let c: Cidr = "fd00::/108".parse().unwrap();
        assert!(c.is_v6());
        assert_eq!(c.ip(1).to_string(), "fd00::1");
        assert_eq!(c.offset("10.0.0.1".parse().unwrap()), None);
        assert_eq!(c.dynamic_start(), 256);
        assert!("::/0".parse::<Cidr>().is_ok());
        assert!("10.0.0.0/31".parse::<Cidr>().is_err());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nonsense".parse::<Cidr>().is_err());
        let p: PortRange = "30000-30002".parse().unwrap();
        assert_eq!(p.to_string(), "30000-30002");
        assert!("3-1".parse::<PortRange>().is_err());
    }
}
