//! API keys on the dashboard, and the masked secret every secret is shown as (API keys and
//! webhook signing secrets, [`MaskedSecret`]): the key panel (the key masked, Reveal and Copy, its id, the
//! Rotate form with the grace period, and Revoke now while a replaced key's grace period runs)
//! on an endpoint's Sandbox and Production tabs (the viewer's own key) and on the
//! Collaborators page (each collaborator's keys, for the owner); and the two forms' posts.
//!
//! The full key is only in a hidden input, the one Copy and Reveal read (`static/app.js`);
//! the visible text is masked until revealed. Right after a rotation the page shows the new
//! key revealed, with the flash. A collaborator's key is its holder's credential: the owner's
//! panel of it shows it masked, with its id and the Rotate and Revoke forms, and the page
//! never carries the key itself.

use super::page::{Failure, Outcome, redirect};
use super::visitor::{User, signed_in, user_form};
use crate::domain::api_keys::{self, HeldKey, Holder, KeyState, Rotation};
use crate::domain::error::{Error, Missing};
use crate::http::app::App;
use crate::http::reply::{id_param, query_params};
use crate::http::request::Request;
use crate::store::Environment;

/// The grace periods the Rotate form offers, in seconds, with what each does to the old key
/// (the select's label reads "After rotating, the old key …").
pub const GRACE_CHOICES: [(u64, &str); 4] = [
    (0, "stops working at once"),
    (3600, "keeps working for 1 hour, then stops"),
    (86_400, "keeps working for 24 hours, then stops"),
    (604_800, "keeps working for 7 days, then stops"),
];

/// A secret as a page shows it (`dashboard/masked_secret.html`): masked, with Reveal and
/// Copy when the viewer may see it whole. API keys and webhook signing secrets alike.
pub struct MaskedSecret {
    /// The id of the hidden input holding the secret (what Copy and Reveal name).
    pub dom_id: String,
    /// What the secret is, for screen readers: "Sandbox key of ada@example.com".
    pub label: String,
    /// The secret, when the viewer may see it whole.
    pub value: Option<String>,
    /// `tm_test_••••••••1a2b`: the prefix and the last four characters.
    pub masked: String,
    /// Shown unmasked at first: the secret was just made.
    pub revealed: bool,
}

impl MaskedSecret {
    /// `value`, whose prefix is `prefix`, shown masked: the prefix, eight dots and its last
    /// four characters.
    pub fn new(dom_id: String, label: String, value: String, prefix: &str) -> MaskedSecret {
        MaskedSecret {
            masked: masked(&value, prefix),
            dom_id,
            label,
            value: Some(value),
            revealed: false,
        }
    }
}

/// One key as a panel shows it.
pub struct KeyPanel {
    /// The key, masked; whole on a panel of the viewer's own key only.
    pub secret: MaskedSecret,
    /// The key's path: its forms post to [`KeyPanel::rotate_action`] and
    /// [`KeyPanel::revoke_action`].
    pub action: String,
    pub state: KeyState,
}

impl KeyPanel {
    /// The panel of `holder`'s key of `environment` on the endpoint `slug`, as `user` sees it.
    pub fn load(
        app: &App,
        req: &Request,
        user: &User,
        slug: &str,
        holder: Holder,
        environment: Environment,
        label: String,
    ) -> Result<KeyPanel, Failure> {
        let HeldKey { key, state } =
            api_keys::held_key(&app.endpoints, &user.account, slug, holder, environment)?;
        let dom_id = dom_id(holder, environment);
        let action = match holder {
            Holder::Own => format!("/dashboard/endpoints/{slug}/keys/{}", environment.as_str()),
            Holder::Collaborator(id) => format!(
                "/dashboard/endpoints/{slug}/collaborators/{id}/keys/{}",
                environment.as_str()
            ),
        };
        let own = holder == Holder::Own;
        let revealed = own
            && query_params(&req.query)
                .get("revealed")
                .is_some_and(|shown| *shown == dom_id);
        let secret = MaskedSecret {
            value: own.then(|| key.clone()),
            revealed,
            ..MaskedSecret::new(dom_id, label, key, environment.key_prefix())
        };
        Ok(KeyPanel {
            secret,
            action,
            state,
        })
    }

    /// The key as `dashboard/masked_secret.html` shows it.
    pub fn shown(&self) -> &MaskedSecret {
        &self.secret
    }

    /// The id the panel's elements are named after.
    pub fn dom_id(&self) -> &str {
        &self.secret.dom_id
    }

    pub fn grace_choices(&self) -> &'static [(u64, &'static str)] {
        &GRACE_CHOICES
    }

    /// Where the Rotate form posts (a refusal is shown beside it).
    pub fn rotate_action(&self) -> String {
        format!("{}/rotate", self.action)
    }

    /// Where Revoke now posts. Its refusal is shown in the panel even when the form is gone,
    /// as it is when another tab revoked the previous key first.
    pub fn revoke_action(&self) -> String {
        format!("{}/revoke-previous", self.action)
    }
}

/// The id of the hidden input holding a panel's key: `sandbox-key` for the viewer's own,
/// `collab-{id}-sandbox-key` for a collaborator's.
fn dom_id(holder: Holder, environment: Environment) -> String {
    match holder {
        Holder::Own => format!("{}-key", environment.as_str()),
        Holder::Collaborator(id) => format!("collab-{id}-{}-key", environment.as_str()),
    }
}

/// A secret's prefix, eight dots and its last four characters.
fn masked(secret: &str, prefix: &str) -> String {
    let tail = secret
        .char_indices()
        .rev()
        .nth(3)
        .map_or("", |(at, _)| &secret[at..]);
    format!("{prefix}••••••••{tail}")
}

/// Whose keys a dashboard path names: the viewer's own, or a collaborator's by account id.
fn holder(account_id: Option<&str>) -> Result<Holder, Failure> {
    Ok(match account_id {
        None => Holder::Own,
        Some(id) => Holder::Collaborator(id_param(id, Missing::Collaborator)?),
    })
}

/// Where to go back to after a key form: the key's panel on the tab of the viewer's own key,
/// or on the Collaborators page.
fn back(slug: &str, holder: Holder, environment: Environment, query: &str) -> Outcome {
    let page = match (holder, environment) {
        (Holder::Own, Environment::Sandbox) => "",
        (Holder::Own, Environment::Production) => "/production",
        (Holder::Collaborator(_), _) => "/collaborators",
    };
    let panel = dom_id(holder, environment);
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}{page}?{query}#{panel}-panel"
    )))
}

/// `POST …/keys/{environment}/rotate` and `…/collaborators/{id}/keys/{environment}/rotate`:
/// the Rotate form, with `grace_period_seconds`.
pub async fn rotate(
    app: &App,
    req: &mut Request,
    slug: &str,
    account_id: Option<&str>,
    environment: Environment,
) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let holder = holder(account_id)?;
    let grace = form.text("grace_period_seconds").parse().map_err(|_| {
        Error::InvalidRequest("Choose how long the previous key stays valid.".into())
    })?;
    let rotation = Rotation {
        grace_period_seconds: grace,
    };
    api_keys::rotate(
        &app.endpoints,
        &user.account,
        slug,
        holder,
        environment,
        rotation,
    )?;
    let query = format!("done=key-rotated&revealed={}", dom_id(holder, environment));
    back(slug, holder, environment, &query)
}

/// `POST …/keys/{environment}/revoke-previous` and the same under `…/collaborators/{id}/`:
/// Revoke now.
pub async fn revoke_previous(
    app: &App,
    req: &mut Request,
    slug: &str,
    account_id: Option<&str>,
    environment: Environment,
) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let holder = holder(account_id)?;
    api_keys::revoke_previous(&app.endpoints, &user.account, slug, holder, environment)?;
    back(slug, holder, environment, "done=key-revoked")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_masked_key_shows_its_prefix_and_last_four_characters() {
        assert_eq!(
            masked("tm_test_abcdefgh1a2b", Environment::Sandbox.key_prefix()),
            "tm_test_••••••••1a2b"
        );
        assert_eq!(
            masked("tm_live_xyz9", Environment::Production.key_prefix()),
            "tm_live_••••••••xyz9"
        );
    }
}
