// `sqlx::migrate!` embeds migrations/postgres at compile time, but cargo does not know
// the macro reads that directory: without this, a new or changed migration alone does
// not rebuild the gateway.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
