//! The route table: every path the server answers, its template and its methods.

use http::Method;

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    Health,
    DataCollection { slug: &'a str },
    DataSearch { slug: &'a str },
    DataPoll { slug: &'a str },
    DataRecord { slug: &'a str, record_id: &'a str },
    ManageEndpoints,
    ManageEndpoint { slug: &'a str },
    ManageDeploy { slug: &'a str },
    ManageRequests { slug: &'a str },
    ManageMail,
    ManageMailTest,
    ManageMailMessage { id: &'a str },
}

impl<'a> Route<'a> {
    pub fn resolve(path: &'a str) -> Option<Route<'a>> {
        let path = path.strip_suffix('/').unwrap_or(path);
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        if segments.iter().any(|s| s.is_empty()) {
            return None;
        }
        Some(match segments.as_slice() {
            ["healthz"] => Route::Health,
            ["api", "v1", "data", slug] => Route::DataCollection { slug },
            ["api", "v1", "data", slug, "search"] => Route::DataSearch { slug },
            ["api", "v1", "data", slug, "poll"] => Route::DataPoll { slug },
            ["api", "v1", "data", slug, record_id] => Route::DataRecord { slug, record_id },
            ["api", "v1", "manage", "endpoints"] => Route::ManageEndpoints,
            ["api", "v1", "manage", "endpoints", slug] => Route::ManageEndpoint { slug },
            ["api", "v1", "manage", "endpoints", slug, "deploy"] => Route::ManageDeploy { slug },
            ["api", "v1", "manage", "endpoints", slug, "requests"] => {
                Route::ManageRequests { slug }
            }
            ["api", "v1", "manage", "mail"] => Route::ManageMail,
            ["api", "v1", "manage", "mail", "test"] => Route::ManageMailTest,
            ["api", "v1", "manage", "mail", id] => Route::ManageMailMessage { id },
            _ => return None,
        })
    }

    /// The path template, as logged.
    pub fn template(&self) -> &'static str {
        match self {
            Route::Health => "/healthz",
            Route::DataCollection { .. } => "/api/v1/data/{slug}",
            Route::DataSearch { .. } => "/api/v1/data/{slug}/search",
            Route::DataPoll { .. } => "/api/v1/data/{slug}/poll",
            Route::DataRecord { .. } => "/api/v1/data/{slug}/{record_id}",
            Route::ManageEndpoints => "/api/v1/manage/endpoints",
            Route::ManageEndpoint { .. } => "/api/v1/manage/endpoints/{slug}",
            Route::ManageDeploy { .. } => "/api/v1/manage/endpoints/{slug}/deploy",
            Route::ManageRequests { .. } => "/api/v1/manage/endpoints/{slug}/requests",
            Route::ManageMail => "/api/v1/manage/mail",
            Route::ManageMailTest => "/api/v1/manage/mail/test",
            Route::ManageMailMessage { .. } => "/api/v1/manage/mail/{id}",
        }
    }

    /// The methods this route answers, as an `Allow` header value.
    pub fn allowed(&self) -> &'static str {
        match self {
            Route::Health
            | Route::DataSearch { .. }
            | Route::DataPoll { .. }
            | Route::ManageRequests { .. }
            | Route::ManageMail
            | Route::ManageMailMessage { .. } => "GET",
            Route::DataCollection { .. } | Route::ManageEndpoints => "GET, POST",
            Route::DataRecord { .. } => "GET, PUT, DELETE",
            Route::ManageEndpoint { .. } => "GET, PATCH",
            Route::ManageDeploy { .. } | Route::ManageMailTest => "POST",
        }
    }

    pub fn check_method(&self, method: &Method) -> Result<()> {
        let allowed = self.allowed();
        if allowed.split(", ").any(|m| m == method.as_str()) {
            Ok(())
        } else {
            Err(Error::MethodNotAllowed(allowed))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_paths() {
        assert_eq!(
            Route::resolve("/api/v1/data/abc"),
            Some(Route::DataCollection { slug: "abc" })
        );
        assert_eq!(
            Route::resolve("/api/v1/data/abc/rec_1/"),
            Some(Route::DataRecord {
                slug: "abc",
                record_id: "rec_1"
            })
        );
        assert_eq!(Route::resolve("/api/v1/data"), None);
        assert_eq!(Route::resolve("/api/v1/data//x"), None);
        assert_eq!(Route::resolve("/api/v1/data/a/b/c"), None);
        assert_eq!(
            Route::resolve("/api/v1/manage/endpoints/s/deploy"),
            Some(Route::ManageDeploy { slug: "s" })
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/mail"),
            Some(Route::ManageMail)
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/mail/test"),
            Some(Route::ManageMailTest)
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/mail/12"),
            Some(Route::ManageMailMessage { id: "12" })
        );
    }

    #[test]
    fn methods() {
        let r = Route::DataRecord {
            slug: "s",
            record_id: "r",
        };
        assert!(r.check_method(&Method::PUT).is_ok());
        assert!(matches!(
            r.check_method(&Method::POST),
            Err(Error::MethodNotAllowed("GET, PUT, DELETE"))
        ));
    }
}
