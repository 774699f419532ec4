//! A test certificate authority (rcgen): leaf certificates for `localhost` and `127.0.0.1`,
//! for the TLS tests of intake's own listener and of its connections to PostgreSQL.

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::CertificateDer;

pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// The CA's certificate as PEM (what a client trusts).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf for localhost and 127.0.0.1 as a full chain (leaf, then CA) and its key, as PEM.
    pub fn issue(&self) -> (String, String) {
        let params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = params.signed_by(&leaf_key, &self.issuer).unwrap();
        (
            format!("{}{}", leaf.pem(), self.issuer.pem()),
            leaf_key.serialize_pem(),
        )
    }

    /// [`Ca::issue`] written to `cert` and `key`.
    pub fn issue_to(&self, cert: &Path, key: &Path) {
        let (chain, key_pem) = self.issue();
        std::fs::write(cert, chain).unwrap();
        std::fs::write(key, key_pem).unwrap();
    }
}
