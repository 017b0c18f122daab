//! Where a remote store is: what a repository location names, parsed by
//! [`crate::store::location`] and opened by the SFTP and S3 backends.

/// Where the repository is: `sftp://[user@]host[:port]/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SftpTarget {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    /// The repository directory on the server: absolute, or relative to the login directory
    /// (`sftp://host/~/repo`).
    pub path: String,
}

/// Where the repository is: an endpoint (none: AWS or `AWS_ENDPOINT_URL`), a bucket, a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Target {
    pub endpoint: Option<String>,
    pub bucket: String,
    pub prefix: String,
}
