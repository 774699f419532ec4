//! Reading an HTML form post: an `application/x-www-form-urlencoded` body, size-limited.

use http::header;

use crate::http::error::Result;
use crate::http::reply::read_body;
use crate::http::request::Request;

/// The fields of a posted form, in order; a name may repeat (checkboxes).
#[derive(Clone, Debug, Default)]
pub struct Form {
    fields: Vec<(String, String)>,
}

impl Form {
    /// Reads and parses the request body (415 for any other content type, 413 past `limit`
    /// bytes: [`crate::http::request::MAX_MANAGE_BODY`] for every form but the record editor's).
    pub async fn read(req: &mut Request, limit: usize) -> Result<Form> {
        let urlencoded = req
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !urlencoded {
            return Err(crate::http::error::HttpError::UnsupportedMediaType(
                "application/x-www-form-urlencoded",
            ));
        }
        let bytes = read_body(req, limit).await?;
        Ok(Form::parse(&bytes))
    }

    pub fn parse(bytes: &[u8]) -> Form {
        Form {
            fields: form_urlencoded::parse(bytes).into_owned().collect(),
        }
    }

    /// The first value of `name`, if sent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of `name`, or an empty string.
    pub fn text(&self, name: &str) -> &str {
        self.get(name).unwrap_or("")
    }

    /// Every value of `name`, in order.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A checkbox: sent (with any value) means on.
    pub fn checked(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repeated_and_encoded_fields() {
        let f = Form::parse(b"name=Orders+A%26B&perm=read&perm=create&empty=");
        assert_eq!(f.get("name"), Some("Orders A&B"));
        assert_eq!(f.all("perm").collect::<Vec<_>>(), ["read", "create"]);
        assert_eq!(f.text("missing"), "");
        assert!(f.checked("empty"));
        assert!(!f.checked("missing"));
    }
}
