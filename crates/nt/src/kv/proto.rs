//! memcached's protocol over UDP, as real clients and servers speak it (memcached's
//! `doc/protocol.txt`): every datagram starts with an 8-byte frame header (request id, sequence
//! number, datagram count, 2 reserved bytes meant to be zero — memcached ignores them, and so
//! does this: Debian's memcaslap sends whatever its buffer held there), followed by the text
//! protocol. A request fits in one datagram (memcached answers a longer one with an error); a
//! response may span several, each with the request's id and its own sequence number.
//!
//! Everything here borrows from the datagram: parsing never allocates and never panics, whatever
//! the bytes (a property test and the `memcache` fuzz target hold it to that).

/// Bytes of the UDP frame header.
pub const FRAME_LEN: usize = 8;
/// The longest key memcached accepts.
pub const MAX_KEY: usize = 250;
/// The most payload memcached puts in one response datagram (its `UDP_MAX_PAYLOAD_SIZE`),
/// frame header included.
pub const MAX_DATAGRAM: usize = 1400;

/// A datagram's frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The request id the client chose; a response carries it back.
    pub id: u16,
    /// This datagram's number in its message, from 0.
    pub seq: u16,
    /// Datagrams in the message.
    pub total: u16,
}

impl Frame {
    /// The frame header of `datagram` and the text after it; `None` if it is shorter than a
    /// header, counts no datagram or numbers itself past the count. The reserved bytes are not
    /// read (memcached does not read them either).
    pub fn parse(datagram: &[u8]) -> Option<(Frame, &[u8])> {
        let h = datagram.get(..FRAME_LEN)?;
        let be = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        let f = Frame { id: be(0), seq: be(2), total: be(4) };
        (f.total > 0 && f.seq < f.total).then_some((f, &datagram[FRAME_LEN..]))
    }

    /// Writes the header into `out[..8]`.
    pub fn emit(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.id.to_be_bytes());
        out[2..4].copy_from_slice(&self.seq.to_be_bytes());
        out[4..6].copy_from_slice(&self.total.to_be_bytes());
        out[6..8].copy_from_slice(&[0, 0]);
    }
}

/// The storage commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCmd {
    /// `set`
    Set,
    /// `add`
    Add,
    /// `replace`
    Replace,
}

/// A request, borrowed from its datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// `get`/`gets` with one or more keys ([`keys`] walks them).
    Get {
        /// The keys, separated by spaces.
        keys: &'a [u8],
        /// `gets`: the client wants CAS ids.
        cas: bool,
    },
    /// `set`/`add`/`replace`.
    Store {
        /// Which.
        cmd: StoreCmd,
        /// The key.
        key: &'a [u8],
        /// The client's opaque flags.
        flags: u32,
        /// Expiry as given: 0 never, up to 30 days relative seconds, else a Unix time; negative
        /// is already expired.
        exptime: i64,
        /// The value (without its trailing `\r\n`).
        value: &'a [u8],
        /// The client asked for no reply.
        noreply: bool,
    },
    /// `delete <key>`.
    Delete {
        /// The key.
        key: &'a [u8],
        /// The client asked for no reply.
        noreply: bool,
    },
    /// `touch <key> <exptime>`.
    Touch {
        /// The key.
        key: &'a [u8],
        /// New expiry, as in [`Request::Store`].
        exptime: i64,
        /// The client asked for no reply.
        noreply: bool,
    },
    /// `incr`, `decr`, `append`, `prepend`, `cas`, `gat`, and the meta commands that write
    /// (`ms`, `md`, `ma`): they change keys in ways a cache does not follow.
    Mutate {
        /// The keys changed, separated by spaces ([`keys`] walks them).
        keys: &'a [u8],
    },
    /// `flush_all`, or a write a cache cannot tell the key of (a meta command with a
    /// base64 key): every key may have changed.
    Flush,
    /// Anything else (`stats`, `version`, …): a cache leaves it alone.
    Other,
}

/// Why a request does not parse: what memcached itself would answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestError {
    /// No complete command line, or the data block is shorter than announced.
    Incomplete,
    /// A command line memcached would reject (`CLIENT_ERROR bad command line format`).
    BadFormat,
    /// The data block does not end in `\r\n` (`CLIENT_ERROR bad data chunk`).
    BadDataChunk,
    /// An unknown command (`ERROR`).
    Unknown,
}

impl RequestError {
    /// The reply memcached gives (without the frame header).
    pub fn reply(self) -> &'static [u8] {
        match self {
            RequestError::Incomplete | RequestError::BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            RequestError::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            RequestError::Unknown => b"ERROR\r\n",
        }
    }
}

/// The line at the start of `b` (without `\r\n` or `\n`) and what follows it.
fn line(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = b.iter().position(|&c| c == b'\n')?;
    let l = &b[..n];
    Some((l.strip_suffix(b"\r").unwrap_or(l), &b[n + 1..]))
}

fn words(l: &[u8]) -> impl Iterator<Item = &[u8]> {
    l.split(|&c| c == b' ').filter(|w| !w.is_empty())
}

/// True if `k` is a key memcached (1.6) takes as one: 1–250 bytes with no space (it splits a
/// line at spaces only, so tabs and other control bytes are part of a key, and Debian's
/// memcaslap writes such keys), no line feed and no NUL (it reads a line as a C string: a
/// request with one passes on unread, uncached).
pub fn valid_key(k: &[u8]) -> bool {
    !k.is_empty() && k.len() <= MAX_KEY && k.iter().all(|&c| c != b' ' && c != b'\n' && c != 0)
}

/// The keys of a `get` request's key list.
pub fn keys(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    words(list)
}

fn num<T: std::str::FromStr>(w: Option<&[u8]>) -> Result<T, RequestError> {
    std::str::from_utf8(w.ok_or(RequestError::BadFormat)?).ok().and_then(|s| s.parse().ok()).ok_or(RequestError::BadFormat)
}

fn key(w: Option<&[u8]>) -> Result<&[u8], RequestError> {
    w.filter(|k| valid_key(k)).ok_or(RequestError::BadFormat)
}

fn noreply(w: Option<&[u8]>) -> Result<bool, RequestError> {
    match w {
        None => Ok(false),
        Some(b"noreply") => Ok(true),
        Some(_) => Err(RequestError::BadFormat),
    }
}

/// Parses the request text of one datagram (after its frame header).
pub fn parse_request(text: &[u8]) -> Result<Request<'_>, RequestError> {
    let (l, rest) = line(text).ok_or(RequestError::Incomplete)?;
    let mut w = words(l);
    let cmd = w.next().ok_or(RequestError::Unknown)?;
    // The text after the command word and one more (`gat <exptime> <keys>`), as a key list.
    let after = |skip: usize| -> Result<&[u8], RequestError> {
        let spaces = |t: &[u8]| t.iter().take_while(|&&c| c == b' ').count();
        let mut t = &l[spaces(l)..];
        for _ in 0..=skip {
            let n = t.iter().position(|&c| c == b' ').unwrap_or(t.len());
            t = &t[n + spaces(&t[n..])..];
        }
        let t = &t[..t.len() - t.iter().rev().take_while(|&&c| c == b' ').count()];
        if t.is_empty() || !keys(t).all(valid_key) {
            return Err(RequestError::BadFormat);
        }
        Ok(t)
    };
    match cmd {
        b"get" | b"gets" => Ok(Request::Get { keys: after(0)?, cas: cmd == b"gets" }),
        b"gat" | b"gats" => {
            let _: i64 = num(w.next())?;
            Ok(Request::Mutate { keys: after(1)? })
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let k = key(w.next())?;
            let flags: u32 = num(w.next())?;
            let exptime: i64 = num(w.next())?;
            let len: usize = num(w.next())?;
            if cmd == b"cas" {
                let _: u64 = num(w.next())?;
            }
            let nr = noreply(w.next())?;
            if w.next().is_some() {
                return Err(RequestError::BadFormat);
            }
            let value = rest.get(..len).ok_or(RequestError::Incomplete)?;
            match rest.get(len..len + 2) {
                Some(b"\r\n") => {}
                None => return Err(RequestError::Incomplete),
                Some(_) => return Err(RequestError::BadDataChunk),
            }
            let store = |cmd| Request::Store { cmd, key: k, flags, exptime, value, noreply: nr };
            Ok(match cmd {
                b"set" => store(StoreCmd::Set),
                b"add" => store(StoreCmd::Add),
                b"replace" => store(StoreCmd::Replace),
                _ => Request::Mutate { keys: k },
            })
        }
        b"delete" => {
            let k = key(w.next())?;
            Ok(Request::Delete { key: k, noreply: noreply(w.next())? })
        }
        b"touch" => {
            let k = key(w.next())?;
            let exptime: i64 = num(w.next())?;
            Ok(Request::Touch { key: k, exptime, noreply: noreply(w.next())? })
        }
        b"incr" | b"decr" => {
            let k = key(w.next())?;
            let _: u64 = num(w.next())?;
            Ok(Request::Mutate { keys: k })
        }
        b"ms" | b"md" | b"ma" => {
            let k = key(w.next())?;
            // A `b` flag: the key is base64, not the bytes a `get` names.
            if w.any(|f| f.first() == Some(&b'b')) {
                return Ok(Request::Flush);
            }
            Ok(Request::Mutate { keys: k })
        }
        b"flush_all" => Ok(Request::Flush),
        b"stats" | b"version" | b"verbosity" | b"quit" | b"mg" | b"mn" | b"me" => Ok(Request::Other),
        _ => Err(RequestError::Unknown),
    }
}

/// What a request changes, read from its command line alone: for the first fragment of a
/// request too long for one IP packet, whose data the NT never sees whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changes<'a> {
    /// Nothing (a read, `stats`, an unknown command the server refuses).
    Nothing,
    /// These keys, separated by spaces ([`keys`] walks them).
    Keys(&'a [u8]),
    /// Possibly any key (`flush_all`, a base64 key, a line that did not fit).
    All,
}

/// What the request starting `text` changes, from its first line.
pub fn changes(text: &[u8]) -> Changes<'_> {
    let Some((l, _)) = line(text) else { return Changes::All };
    let mut w = words(l);
    match w.next() {
        Some(b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" | b"delete" | b"touch" | b"incr" | b"decr") => {
            w.next().filter(|k| valid_key(k)).map_or(Changes::Nothing, Changes::Keys)
        }
        Some(b"get" | b"gets" | b"stats" | b"version" | b"verbosity" | b"quit" | b"mg" | b"mn" | b"me") | None => Changes::Nothing,
        _ => match parse_request(text) {
            Ok(Request::Mutate { keys }) => Changes::Keys(keys),
            Ok(Request::Flush) => Changes::All,
            Err(RequestError::Unknown) => Changes::Nothing,
            _ => Changes::All,
        },
    }
}

/// One `VALUE` of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The client's flags.
    pub flags: u32,
    /// The data.
    pub data: &'a [u8],
    /// The CAS id, for `gets`.
    pub cas: Option<u64>,
}

/// A response, as a cache reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// `VALUE …` lines then `END` (a `get` answered; [`values`] walks them).
    Values,
    /// `STORED`.
    Stored,
    /// `DELETED`, `TOUCHED`, `NOT_FOUND`, `NOT_STORED`, `EXISTS`, errors, anything else.
    Other,
}

/// What kind of response the text of a whole message is.
pub fn response_kind(text: &[u8]) -> Response {
    if text.starts_with(b"VALUE ") || text == b"END\r\n" {
        Response::Values
    } else if text == b"STORED\r\n" {
        Response::Stored
    } else {
        Response::Other
    }
}

/// Walks the `VALUE` blocks of a `get` response's whole text, calling `f` on each; `Err` if it
/// is not a well-formed one ending in `END\r\n` (then `f` may have seen some values: a caller
/// that must not act on a malformed response collects first).
pub fn values<'a>(text: &'a [u8], f: impl FnMut(Value<'a>)) -> Result<(), RequestError> {
    match value_blocks(text, f)? {
        true => Ok(()),
        false => Err(RequestError::Incomplete),
    }
}

/// Walks the `VALUE` blocks of one message of a `get` response: `Ok(true)` if it ends the
/// response (`END\r\n` last), `Ok(false)` if it ends after a whole block (memcached answers a
/// read of several keys over UDP with one message per key, the last ending in `END`).
pub fn value_blocks<'a>(mut text: &'a [u8], mut f: impl FnMut(Value<'a>)) -> Result<bool, RequestError> {
    loop {
        if text.is_empty() {
            return Ok(false);
        }
        let (l, rest) = line(text).ok_or(RequestError::Incomplete)?;
        if l == b"END" {
            return if rest.is_empty() { Ok(true) } else { Err(RequestError::BadFormat) };
        }
        let mut w = words(l);
        if w.next() != Some(b"VALUE") {
            return Err(RequestError::BadFormat);
        }
        let key = key(w.next())?;
        let flags = num(w.next())?;
        let len: usize = num(w.next())?;
        let cas = w.next().map(|c| num(Some(c))).transpose()?;
        let data = rest.get(..len).ok_or(RequestError::Incomplete)?;
        if rest.get(len..len + 2) != Some(b"\r\n") {
            return Err(RequestError::BadDataChunk);
        }
        f(Value { key, flags, data, cas });
        text = &rest[len + 2..];
    }
}

/// Bytes a `get` response holding `values` takes (`VALUE k f n\r\n`, data, `\r\n`, …, `END\r\n`).
pub fn values_len<'a>(values: impl IntoIterator<Item = (&'a [u8], u32, usize)>) -> usize {
    let digits = |mut n: u64| {
        let mut d = 1;
        while n >= 10 {
            n /= 10;
            d += 1;
        }
        d
    };
    values.into_iter().map(|(k, f, n)| 6 + k.len() + 1 + digits(f as u64) + 1 + digits(n as u64) + 2 + n + 2).sum::<usize>() + 5
}

/// Writes `VALUE key flags len\r\n` into `out`; returns the bytes written, `None` if it does
/// not fit.
pub fn emit_value_line(out: &mut [u8], key: &[u8], flags: u32, len: usize) -> Option<usize> {
    use std::io::Write;
    let mut c = std::io::Cursor::new(out);
    c.write_all(b"VALUE ").ok()?;
    c.write_all(key).ok()?;
    write!(c, " {flags} {len}\r\n").ok()?;
    Some(c.position() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_parse_and_emit() {
        let mut b = [0u8; 8];
        Frame { id: 0x1234, seq: 1, total: 3 }.emit(&mut b);
        assert_eq!(b, [0x12, 0x34, 0, 1, 0, 3, 0, 0]);
        let mut d = b.to_vec();
        d.extend_from_slice(b"get k\r\n");
        assert_eq!(Frame::parse(&d), Some((Frame { id: 0x1234, seq: 1, total: 3 }, &b"get k\r\n"[..])));
        // Reserved bytes set (memcaslap leaves its buffer's bytes there): memcached serves such
        // a request, and so the NTs read it.
        assert_eq!(Frame::parse(&[0, 1, 0, 0, 0, 1, 1, 0]), Some((Frame { id: 1, seq: 0, total: 1 }, &[][..])));
        assert_eq!(Frame::parse(&[0, 1, 0, 1, 0, 1, 0, 0]), None, "seq past total");
        assert_eq!(Frame::parse(&[0, 1, 0, 0]), None, "short");
    }

    #[test]
    fn requests_parse_as_memcached_reads_them() {
        assert_eq!(parse_request(b"get a bb  c\r\n"), Ok(Request::Get { keys: b"a bb  c", cas: false }));
        assert_eq!(keys(b"a bb  c").collect::<Vec<_>>(), [&b"a"[..], b"bb", b"c"]);
        assert_eq!(parse_request(b"gets k\n"), Ok(Request::Get { keys: b"k", cas: true }));
        assert_eq!(
            parse_request(b"set k 5 0 3\r\nabc\r\n"),
            Ok(Request::Store { cmd: StoreCmd::Set, key: b"k", flags: 5, exptime: 0, value: b"abc", noreply: false })
        );
        assert_eq!(
            parse_request(b"add k 0 -1 0 noreply\r\n\r\n"),
            Ok(Request::Store { cmd: StoreCmd::Add, key: b"k", flags: 0, exptime: -1, value: b"", noreply: true })
        );
        assert_eq!(parse_request(b"cas k 0 0 1 99\r\nx\r\n"), Ok(Request::Mutate { keys: b"k" }));
        assert_eq!(parse_request(b"delete k noreply\r\n"), Ok(Request::Delete { key: b"k", noreply: true }));
        assert_eq!(parse_request(b"touch k 10\r\n"), Ok(Request::Touch { key: b"k", exptime: 10, noreply: false }));
        assert_eq!(parse_request(b"incr n 1\r\n"), Ok(Request::Mutate { keys: b"n" }));
        assert_eq!(parse_request(b"gat 10 a b\r\n"), Ok(Request::Mutate { keys: b"a b" }));
        assert_eq!(parse_request(b"ms k 2 T0\r\nhi\r\n"), Ok(Request::Mutate { keys: b"k" }));
        assert_eq!(parse_request(b"md a2V5 b\r\n"), Ok(Request::Flush), "a base64 key is not the bytes a get names");
        assert_eq!(parse_request(b"flush_all\r\n"), Ok(Request::Flush));
        assert_eq!(parse_request(b"stats\r\n"), Ok(Request::Other));
    }

    #[test]
    fn a_command_line_alone_says_what_changes() {
        assert_eq!(changes(b"set big 0 0 4000\r\nxxxx"), Changes::Keys(b"big"));
        assert_eq!(changes(b"delete k\r\n"), Changes::Keys(b"k"));
        assert_eq!(changes(b"get k\r\n"), Changes::Nothing);
        assert_eq!(changes(b"gat 1 a b\r\n"), Changes::Keys(b"a b"));
        assert_eq!(changes(b"flush_all\r\n"), Changes::All);
        assert_eq!(changes(b"set k 0 0 4000"), Changes::All, "no whole line");
        assert_eq!(changes(b"bogus\r\n"), Changes::Nothing, "the server refuses it");
        assert_eq!(changes(b"set\r\n"), Changes::Nothing, "the server refuses it");
    }

    /// Keys as memcached 1.6.18 reads them (tried against it over UDP): a line splits at
    /// spaces only, so a tab, a carriage return inside the line or any other control byte is
    /// part of a key (memcaslap's keys start with such bytes); a NUL ends memcached's line, so
    /// a key with one is not read here.
    #[test]
    fn keys_split_at_spaces_only_as_memcached_splits_them() {
        let get = |t: &'static [u8]| match parse_request(t) {
            Ok(Request::Get { keys: k, .. }) => Ok(keys(k).collect::<Vec<_>>()),
            other => Err(other),
        };
        assert_eq!(get(b"get a\tb\r\n"), Ok(vec![&b"a\tb"[..]]));
        assert_eq!(get(b"get   a\tb   \r\n"), Ok(vec![&b"a\tb"[..]]));
        assert_eq!(get(b"get \tk z\rq\r\n"), Ok(vec![&b"\tk"[..], b"z\rq"]));
        assert_eq!(get(b"get \x10\x10k\r\n"), Ok(vec![&b"\x10\x10k"[..]]));
        assert!(get(b"get a\0b\r\n").is_err());
        match parse_request(b"set \x10k 0 0 1\r\ny\r\n") {
            Ok(Request::Store { key, value, .. }) => assert_eq!((key, value), (&b"\x10k"[..], &b"y"[..])),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_requests_get_memcacheds_errors() {
        assert_eq!(parse_request(b"get\r\n"), Err(RequestError::BadFormat));
        assert_eq!(parse_request(b"get k"), Err(RequestError::Incomplete));
        assert_eq!(parse_request(b"bogus\r\n"), Err(RequestError::Unknown));
        assert_eq!(parse_request(b"set k x 0 1\r\na\r\n"), Err(RequestError::BadFormat));
        assert_eq!(parse_request(b"set k 0 0 3\r\nabcd\r\n"), Err(RequestError::BadDataChunk));
        assert_eq!(parse_request(b"set k 0 0 3\r\nab"), Err(RequestError::Incomplete));
        assert_eq!(parse_request(b"set k 0 0 1 maybe\r\na\r\n"), Err(RequestError::BadFormat));
        let long = format!("get {}\r\n", "k".repeat(MAX_KEY + 1));
        assert_eq!(parse_request(long.as_bytes()), Err(RequestError::BadFormat));
        assert_eq!(RequestError::Unknown.reply(), b"ERROR\r\n");
    }

    #[test]
    fn responses_are_told_apart_and_walked() {
        let r = b"VALUE a 1 3\r\nabc\r\nVALUE b 0 0 7\r\n\r\nEND\r\n";
        assert_eq!(response_kind(r), Response::Values);
        assert_eq!(response_kind(b"END\r\n"), Response::Values);
        assert_eq!(response_kind(b"STORED\r\n"), Response::Stored);
        assert_eq!(response_kind(b"NOT_STORED\r\n"), Response::Other);
        let mut seen = vec![];
        values(r, |v| seen.push(v)).unwrap();
        assert_eq!(seen, [Value { key: b"a", flags: 1, data: b"abc", cas: None }, Value { key: b"b", flags: 0, data: b"", cas: Some(7) }]);
        assert!(values(b"VALUE a 1 3\r\nabcd\r\nEND\r\n", |_| {}).is_err());
        assert!(values(b"VALUE a 1 3\r\nabc\r\n", |_| {}).is_err(), "no END: cut short");
        assert!(values(b"END\r\nEND\r\n", |_| {}).is_err());
        assert_eq!(value_blocks(b"VALUE a 1 3\r\nabc\r\n", |_| {}), Ok(false), "one message of several");
        assert_eq!(value_blocks(b"VALUE a 1 3\r\nab", |_| {}), Err(RequestError::Incomplete));
        assert_eq!(value_blocks(b"", |_| {}), Ok(false));
    }

    proptest! {
        /// Whatever the bytes, parsing returns (never panics), and a request's parts are
        /// pieces of the datagram.
        #[test]
        fn any_bytes_parse_or_fail_cleanly(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Frame::parse(&b);
            let _ = parse_request(&b);
            let _ = values(&b, |_| {});
            let _ = response_kind(&b);
            let _ = changes(&b);
            let _ = value_blocks(&b, |_| {});
        }

        /// Requests made of plausible words parse or fail cleanly too (random bytes rarely
        /// reach the numbers and data blocks).
        #[test]
        fn plausible_requests_parse_or_fail_cleanly(
            cmd in prop::sample::select(vec!["get", "gets", "set", "add", "cas", "delete", "touch", "incr", "gat", "ms", "md"]),
            words in proptest::collection::vec("[a-z0-9 -]{0,6}", 0..6),
            data in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let mut b = cmd.as_bytes().to_vec();
            for w in &words { b.push(b' '); b.extend_from_slice(w.as_bytes()); }
            b.extend_from_slice(b"\r\n");
            b.extend_from_slice(&data);
            if let Ok(Request::Store { key, value, .. }) = parse_request(&b) {
                prop_assert!(valid_key(key));
                prop_assert!(value.len() <= data.len());
            }
        }

        /// What `emit_value_line` writes and `values_len` counts is what `values` reads back.
        #[test]
        fn written_values_read_back(items in proptest::collection::vec(("[!-~]{1,20}", any::<u32>(), proptest::collection::vec(any::<u8>(), 0..50)), 0..5)) {
            let mut out = vec![0u8; 4096];
            let mut at = 0;
            for (k, f, d) in &items {
                at += emit_value_line(&mut out[at..], k.as_bytes(), *f, d.len()).unwrap();
                out[at..at + d.len()].copy_from_slice(d);
                at += d.len();
                out[at..at + 2].copy_from_slice(b"\r\n");
                at += 2;
            }
            out[at..at + 5].copy_from_slice(b"END\r\n");
            at += 5;
            prop_assert_eq!(at, values_len(items.iter().map(|(k, f, d)| (k.as_bytes(), *f, d.len()))));
            let mut back = vec![];
            values(&out[..at], |v| back.push((v.key.to_vec(), v.flags, v.data.to_vec()))).unwrap();
            let want: Vec<_> = items.iter().map(|(k, f, d)| (k.as_bytes().to_vec(), *f, d.clone())).collect();
            prop_assert_eq!(back, want);
        }
    }
}
