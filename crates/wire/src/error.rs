//! Why a packet could not be parsed. Each variant is a drop reason the data plane counts.

/// A malformed or unsupported packet, named by what is wrong with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseError {
    /// The buffer ends before the header does.
    Truncated,
    /// An EtherType snic does not carry (outer: not IPv4/IPv6; inner: see [`ParseError::UnknownInnerL3`]).
    UnknownEtherType,
    /// The IP version nibble does not match the EtherType.
    BadIpVersion,
    /// An IPv4 header length below 20 bytes, or a total length that disagrees with the buffer.
    BadIpLength,
    /// The IPv4 header checksum is wrong.
    BadIpChecksum,
    /// IPv4 options on the outer header (VXLAN encapsulation never carries them).
    IpOptions,
    /// A fragment: snic does not reassemble, so ports are not visible.
    Fragment,
    /// The outer packet is not UDP.
    NotUdp,
    /// A UDP length field that disagrees with the IP payload length.
    BadUdpLength,
    /// The outer UDP destination port is not the VXLAN port.
    NotVxlanPort,
    /// VXLAN header without the I (valid VNI) flag.
    BadVxlanFlags,
    /// A TCP data offset below 5 words or past the end of the segment.
    BadTcpHeader,
    /// The inner frame carries neither IPv4 nor IPv6 nor ARP.
    UnknownInnerL3,
    /// Too many IPv6 extension headers, or one that is malformed.
    BadIpv6Extension,
}

impl ParseError {
    /// Every variant, for metrics tables.
    pub const ALL: [ParseError; 14] = [
        ParseError::Truncated,
        ParseError::UnknownEtherType,
        ParseError::BadIpVersion,
        ParseError::BadIpLength,
        ParseError::BadIpChecksum,
        ParseError::IpOptions,
        ParseError::Fragment,
        ParseError::NotUdp,
        ParseError::BadUdpLength,
        ParseError::NotVxlanPort,
        ParseError::BadVxlanFlags,
        ParseError::BadTcpHeader,
        ParseError::UnknownInnerL3,
        ParseError::BadIpv6Extension,
    ];

    /// A stable snake_case name, used as a metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            ParseError::Truncated => "truncated",
            ParseError::UnknownEtherType => "unknown_ethertype",
            ParseError::BadIpVersion => "bad_ip_version",
            ParseError::BadIpLength => "bad_ip_length",
            ParseError::BadIpChecksum => "bad_ip_checksum",
            ParseError::IpOptions => "ip_options",
            ParseError::Fragment => "fragment",
            ParseError::NotUdp => "not_udp",
            ParseError::BadUdpLength => "bad_udp_length",
            ParseError::NotVxlanPort => "not_vxlan_port",
            ParseError::BadVxlanFlags => "bad_vxlan_flags",
            ParseError::BadTcpHeader => "bad_tcp_header",
            ParseError::UnknownInnerL3 => "unknown_inner_l3",
            ParseError::BadIpv6Extension => "bad_ipv6_extension",
        }
    }

    /// Index of this variant in [`ParseError::ALL`], for counter arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for ParseError {}
