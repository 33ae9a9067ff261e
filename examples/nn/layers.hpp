// The layers of the examples' networks, forward and backward written out by hand on Eigen matrices. A batch is a
// matrix with one column per sample (features x batch); a sequence batch holds the T tokens of each sample in T
// consecutive columns (features x (T batch)).
//
// Conventions: a dense layer maps x to y = diag(g) W^T x + b with W of shape in x out, so a W with orthonormal
// columns (a point of St(in, out), in >= out) is an isometric projection; g is an optional per-output gain. Every
// backward function returns the gradient with respect to its input and writes the parameter gradients into the
// caller's matrices (overwriting them). tests: examples/nn/nn_test.cpp checks each against finite differences.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace geomopt::examples {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// y = diag(g) W^T x + b. `gain` may be empty (no gain); `pre` receives W^T x, which the backward pass needs when
// there is a gain.
template <class T>
void dense_forward(const Mat<T>& W, const Vec<T>& gain, const Vec<T>& b, const Mat<T>& x, Mat<T>& pre, Mat<T>& y) {
  pre.noalias() = W.transpose() * x;
  if (gain.size() > 0)
    y = (gain.asDiagonal() * pre).colwise() + b;
  else
    y = pre.colwise() + b;
}

// Given dy, writes dW, dgain (when there is a gain) and db; returns dx unless `want_dx` is false.
template <class T>
void dense_backward(const Mat<T>& W, const Vec<T>& gain, const Mat<T>& x, const Mat<T>& pre, const Mat<T>& dy,
                    Mat<T>& dW, Vec<T>& dgain, Vec<T>& db, Mat<T>* dx) {
  db = dy.rowwise().sum();
  if (gain.size() > 0) {
    dgain = (dy.array() * pre.array()).rowwise().sum().matrix();
    const Mat<T> dpre = gain.asDiagonal() * dy;
    dW.noalias() = x * dpre.transpose();
    if (dx) dx->noalias() = W * dpre;
  } else {
    dW.noalias() = x * dy.transpose();
    if (dx) dx->noalias() = W * dy;
  }
}

template <class T>
void relu_forward(Mat<T>& z) {
  z = z.cwiseMax(T(0));
}

// dz = dy where the ReLU's output was positive.
template <class T>
void relu_backward(const Mat<T>& out, Mat<T>& d) {
  d = (out.array() > T(0)).select(d, T(0));
}

// Softmax cross-entropy averaged over the batch. Returns the mean loss; `dlogits` receives its gradient
// (softmax - onehot) / batch, and `correct` the number of samples whose largest logit is their label.
template <class T>
T softmax_cross_entropy(const Mat<T>& logits, std::span<const std::uint8_t> labels, Mat<T>& dlogits,
                        std::int64_t& correct) {
  const Eigen::Index batch = logits.cols();
  dlogits.resize(logits.rows(), batch);
  T loss = 0;
  correct = 0;
  for (Eigen::Index j = 0; j < batch; ++j) {
    Eigen::Index argmax = 0;
    const T top = logits.col(j).maxCoeff(&argmax);
    const auto label = static_cast<Eigen::Index>(labels[static_cast<std::size_t>(j)]);
    dlogits.col(j) = (logits.col(j).array() - top).exp().matrix();
    const T sum = dlogits.col(j).sum();
    loss += std::log(sum) - (logits(label, j) - top);
    dlogits.col(j) /= sum;
    dlogits(label, j) -= T(1);
    correct += argmax == label;
  }
  dlogits /= static_cast<T>(batch);
  return loss / static_cast<T>(batch);
}

// Single-head self-attention over the T tokens of each sample, with projections Wq, Wk, Wv of shape d x n (points of
// St(d, n) in the attention example): q = Wq^T h, k = Wk^T h, v = Wv^T h, a_i = softmax_j(q_i . k_j / sqrt(n)),
// z_i = sum_j a_ij v_j. `h` is d x (T batch); the result z is n x (T batch). The cache keeps what backward needs.
template <class T>
struct AttentionCache {
  Mat<T> q, k, v, z;
  std::vector<Mat<T>> attn;  // per sample, T x T, row i = query i's weights over the keys
};

template <class T>
void attention_forward(const Mat<T>& Wq, const Mat<T>& Wk, const Mat<T>& Wv, const Mat<T>& h, Eigen::Index tokens,
                       AttentionCache<T>& c) {
  const Eigen::Index batch = h.cols() / tokens;
  const T scale = T(1) / std::sqrt(static_cast<T>(Wq.cols()));
  c.q.noalias() = Wq.transpose() * h;
  c.k.noalias() = Wk.transpose() * h;
  c.v.noalias() = Wv.transpose() * h;
  c.z.resize(Wv.cols(), h.cols());
  c.attn.resize(static_cast<std::size_t>(batch));
  for (Eigen::Index s = 0; s < batch; ++s) {
    const auto q = c.q.middleCols(s * tokens, tokens);
    const auto k = c.k.middleCols(s * tokens, tokens);
    Mat<T>& a = c.attn[static_cast<std::size_t>(s)];
    a.noalias() = (q.transpose() * k) * scale;
    for (Eigen::Index i = 0; i < tokens; ++i) {
      const T top = a.row(i).maxCoeff();
      a.row(i) = (a.row(i).array() - top).exp().matrix();
      a.row(i) /= a.row(i).sum();
    }
    c.z.middleCols(s * tokens, tokens).noalias() = c.v.middleCols(s * tokens, tokens) * a.transpose();
  }
}

// Given dz (n x (T batch)), writes dWq, dWk, dWv and returns dh (d x (T batch)).
template <class T>
Mat<T> attention_backward(const Mat<T>& Wq, const Mat<T>& Wk, const Mat<T>& Wv, const Mat<T>& h,
                          Eigen::Index tokens, const AttentionCache<T>& c, const Mat<T>& dz, Mat<T>& dWq, Mat<T>& dWk,
                          Mat<T>& dWv) {
  const Eigen::Index batch = h.cols() / tokens;
  const T scale = T(1) / std::sqrt(static_cast<T>(Wq.cols()));
  Mat<T> dq(c.q.rows(), c.q.cols()), dk(c.k.rows(), c.k.cols()), dv(c.v.rows(), c.v.cols());
  Mat<T> da, ds;
  for (Eigen::Index s = 0; s < batch; ++s) {
    const Mat<T>& a = c.attn[static_cast<std::size_t>(s)];
    const auto dzs = dz.middleCols(s * tokens, tokens);
    dv.middleCols(s * tokens, tokens).noalias() = dzs * a;           // z = v a^T
    da.noalias() = dzs.transpose() * c.v.middleCols(s * tokens, tokens);
    // Row-wise softmax: ds_ij = a_ij (da_ij - sum_l a_il da_il).
    const Vec<T> inner = (a.array() * da.array()).rowwise().sum().matrix();
    ds = (a.array() * (da.colwise() - inner).array()).matrix() * scale;
    dq.middleCols(s * tokens, tokens).noalias() = c.k.middleCols(s * tokens, tokens) * ds.transpose();
    dk.middleCols(s * tokens, tokens).noalias() = c.q.middleCols(s * tokens, tokens) * ds;
  }
  dWq.noalias() = h * dq.transpose();
  dWk.noalias() = h * dk.transpose();
  dWv.noalias() = h * dv.transpose();
  Mat<T> dh = Wq * dq;
  dh.noalias() += Wk * dk;
  dh.noalias() += Wv * dv;
  return dh;
}

// The mean of each sample's T token columns: (d x (T batch)) -> (d x batch), and its adjoint.
template <class T>
Mat<T> mean_pool(const Mat<T>& x, Eigen::Index tokens) {
  const Eigen::Index batch = x.cols() / tokens;
  Mat<T> out(x.rows(), batch);
  for (Eigen::Index s = 0; s < batch; ++s)
    out.col(s) = x.middleCols(s * tokens, tokens).rowwise().sum() / static_cast<T>(tokens);
  return out;
}

template <class T>
Mat<T> mean_pool_backward(const Mat<T>& d, Eigen::Index tokens) {
  Mat<T> out(d.rows(), d.cols() * tokens);
  for (Eigen::Index s = 0; s < d.cols(); ++s)
    out.middleCols(s * tokens, tokens) = d.col(s).replicate(1, tokens) / static_cast<T>(tokens);
  return out;
}

}  // namespace geomopt::examples
