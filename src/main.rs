fn main() {
    std::process::exit(intake::cli::run());
}
