include!("../scripts/build/mlx_link.rs");

fn main() {
    link_mlx();
}
