//! Config files, and the duration and address-range syntax inside them.
//!
//! Properties: parsing never panics; an accepted file passes `validate` and gives a usable
//! public URL; an accepted duration written back in milliseconds parses to the same
//! duration; an accepted address range contains its own address.
#![no_main]

use std::net::IpAddr;

use intake::core::config::{Cidr, Config, parse_duration};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(config) = Config::parse(text) {
        config.validate().expect("a parsed config is valid");
        let url = config.public_url();
        assert!(!url.ends_with('/'), "{url:?}");
        assert!(
            url.starts_with("http://") || url.starts_with("https://"),
            "{url:?}"
        );
    }

    if let Ok(duration) = parse_duration(text)
        && let Ok(millis) = u64::try_from(duration.as_millis())
    {
        assert_eq!(
            parse_duration(&format!("{millis}ms")),
            Ok(duration),
            "{text:?}"
        );
    }

    if let Some(cidr) = Cidr::parse(text) {
        let address = text.trim().split_once('/').map_or(text.trim(), |(a, _)| a);
        let address: IpAddr = address.parse().expect("an accepted range has an address");
        assert!(
            cidr.contains(address),
            "{text:?} does not contain its own address"
        );
    }
});
