//! Store URLs as messages show them.

/// `url` with its password taken out wherever a PostgreSQL URL may carry
/// one: the user information (`USER:PASSWORD@`, shown as `USER:***@`) and
/// a `password=` parameter of the query (shown as `password=***`). Any
/// other text is returned as it is.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    // The user information ends at the authority's last '@'.
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let user = user.split(':').next().unwrap_or_default();
            format!("{user}:***@{host}")
        }
        _ => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_taken_out_of_both_places() {
        assert_eq!(
            redact_url("postgres://me:pw@db:5432/s?objects=s3://b/p"),
            "postgres://me:***@db:5432/s?objects=s3://b/p"
        );
        assert_eq!(
            redact_url("postgres://me@db/s?password=pw&objects=s3://b/p&PASSWORD=x"),
            "postgres://me@db/s?password=***&objects=s3://b/p&PASSWORD=***"
        );
        assert_eq!(
            redact_url("postgres://me@db/s?objects=s3://b/p"),
            "postgres://me@db/s?objects=s3://b/p"
        );
        assert_eq!(redact_url("/a/dir"), "/a/dir");
        // An '@' in the query is not user information.
        assert_eq!(
            redact_url("postgres://db/s?objects=s3://b/a@b:c"),
            "postgres://db/s?objects=s3://b/a@b:c"
        );
    }
}
