fn main() {
    cwm_fingerprint::emit();
}
